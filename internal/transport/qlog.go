package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	h3qlog "github.com/quic-go/quic-go/http3/qlog"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"
)

// qlogCloseWait bounds how long a close waits for its connection's qlog
// file to be written: HTTP/3 stops producing events for it only after
// the QUIC connection has closed, in a goroutine of its own.
const qlogCloseWait = time.Second

// qlogDir writes the qlog of each QUIC connection of one Dial or Listener
// to a file of its own in dir, as quic-go's qlog.DefaultConnectionTracer
// does for $QLOGDIR: JSON-SEQ, named <ODCID>_<client|server>.sqlog, with
// the QUIC events and, for WebTransport, HTTP/3's.
type qlogDir struct {
	dir    string
	failed func(error) // reports a file that could not be written; may be nil
	open   sync.WaitGroup
}

// newQlogDir returns the qlog writer that o asks for, creating its
// directory, or nil if o asks for none.
func newQlogDir(o Options) (*qlogDir, error) {
	if o.QlogDir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(o.QlogDir, 0o755); err != nil {
		return nil, fmt.Errorf("moqt transport: qlog directory: %w", err)
	}
	return &qlogDir{dir: o.QlogDir, failed: o.QlogFailed}, nil
}

// apply makes c's connections write their qlogs to d; a nil d does nothing.
func (d *qlogDir) apply(c *quic.Config) {
	if d != nil {
		c.Tracer = d.trace
	}
}

// trace is a quic.Config.Tracer.
func (d *qlogDir) trace(_ context.Context, isClient bool, id quic.ConnectionID) qlogwriter.Trace {
	role := "server"
	if isClient {
		role = "client"
	}
	path := filepath.Join(d.dir, fmt.Sprintf("%s_%s.sqlog", id, role))
	f, err := os.Create(path)
	if err != nil {
		d.report(err)
		return nil
	}
	d.open.Add(1)
	done := make(chan struct{})
	w := &qlogWriter{Writer: bufio.NewWriter(f), f: f, closed: func(err error) {
		if err != nil {
			d.report(fmt.Errorf("%s: %w", path, err))
		}
		close(done)
		d.open.Done()
	}}
	seq := qlogwriter.NewConnectionFileSeq(w, isClient, id, []string{qlog.EventSchema, h3qlog.EventSchema})
	go seq.Run()
	return &qlogTrace{FileSeq: seq, done: done}
}

func (d *qlogDir) report(err error) {
	if d.failed != nil {
		d.failed(err)
	}
}

// wait waits, at most qlogCloseWait, until every qlog file d opened is
// written and closed.
func (d *qlogDir) wait() {
	if d == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		d.open.Wait()
		close(done)
	}()
	timer := time.NewTimer(qlogCloseWait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
}

// qlogTrace is the qlog trace of one connection: done is closed once its
// file is written and closed, after its last producer (the connection,
// and HTTP/3 under WebTransport) has let go of it.
type qlogTrace struct {
	*qlogwriter.FileSeq
	done chan struct{}
}

// waitQlog waits, at most qlogCloseWait, until the qlog file of conn, if
// it writes one, is written and closed.
func waitQlog(conn *quic.Conn) {
	t, ok := conn.QlogTrace().(*qlogTrace)
	if !ok {
		return
	}
	timer := time.NewTimer(qlogCloseWait)
	defer timer.Stop()
	select {
	case <-t.done:
	case <-timer.C:
	}
}

// qlogWriter buffers a qlog file's writes; Close flushes and closes it.
type qlogWriter struct {
	*bufio.Writer
	f      *os.File
	closed func(error)
}

func (w *qlogWriter) Close() error {
	err := errors.Join(w.Flush(), w.f.Close())
	w.closed(err)
	return err
}
