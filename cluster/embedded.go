package cluster

import (
	"errors"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// RunNATS starts a NATS server with JetStream inside the process,
// listening on host:port (port -1: any free one) and keeping JetStream's
// files under dir: for tests and single-host trials (`moqt relay
// -nats-embedded`). Its ClientURL is what Config.NATS takes; Shutdown
// stops it.
func RunNATS(host string, port int, dir string) (*server.Server, error) {
	s, err := server.NewServer(&server.Options{
		ServerName: "moqt-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
		NoLog:      true,
	})
	if err != nil {
		return nil, err
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, errors.New("cluster: embedded NATS server not ready")
	}
	return s, nil
}
