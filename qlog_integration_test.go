package moqt

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// TestQlogDir: with Config.QlogDir set, a session over each transport
// leaves one qlog file per end in the directories, complete (its last
// event written, the file flushed) once the client's Close and the
// Server's Close return. A directory that does not exist yet is created.
func TestQlogDir(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			base := t.TempDir()
			serverDir, clientDir := filepath.Join(base, "server"), filepath.Join(base, "client", "nested")
			cert, hash, err := GenerateCertificate("127.0.0.1")
			require.NoError(t, err)
			srv, err := Listen("127.0.0.1:0", quietConfig(&Config{
				TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
				QlogDir:   serverDir,
			}), nil)
			require.NoError(t, err)
			defer srv.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			c, err := Dial(ctx, tr.scheme+"://"+srv.Addr().String()+"/live", quietConfig(&Config{
				TLSConfig:               &tls.Config{RootCAs: x509.NewCertPool()},
				ServerCertificateHashes: [][32]byte{hash},
				QlogDir:                 clientDir,
			}))
			require.NoError(t, err)
			s, err := srv.Accept(ctx)
			require.NoError(t, err)
			_, err = c.TrackStatus(ctx, testTrack, wire.Params{}) // some traffic: refused by DefaultHandler
			require.Error(t, err)

			require.NoError(t, c.Close())
			<-s.Context().Done()
			require.NoError(t, srv.Close())

			for dir, role := range map[string]string{clientDir: "client", serverDir: "server"} {
				files, err := filepath.Glob(filepath.Join(dir, "*_"+role+".sqlog"))
				require.NoError(t, err)
				require.Len(t, files, 1, "one connection, one file in %s", dir)
				b, err := os.ReadFile(files[0])
				require.NoError(t, err)
				log := string(b)
				assert.Contains(t, log, `"vantage_point":{"type":"`+role+`"}`, role)
				assert.Contains(t, log, "urn:ietf:params:qlog:events:quic", role)
				assert.Contains(t, log, `"name":"transport:packet_sent"`, role)
				// The close is the last thing a connection logs: the file
				// was flushed after it.
				assert.Contains(t, log, `"name":"transport:connection_closed"`, role)
				if tr.scheme == "https" {
					assert.True(t, strings.Contains(log, `"name":"http3:`), "%s: HTTP/3's events too", role)
				}
			}
		})
	}
}
