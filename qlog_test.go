package moqt

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestQlogDirNotADirectory: a QlogDir that cannot be a directory fails
// Listen and Dial at once, not each connection silently.
func TestQlogDirNotADirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	cert, _, err := GenerateCertificate("127.0.0.1")
	require.NoError(t, err)
	_, err = Listen("127.0.0.1:0", quietConfig(&Config{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		QlogDir: file}), nil)
	assert.ErrorContains(t, err, "qlog directory")
	_, err = Dial(t.Context(), "moqt://127.0.0.1:1/", quietConfig(&Config{QlogDir: file}))
	assert.ErrorContains(t, err, "qlog directory")
}
