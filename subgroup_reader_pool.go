package moqt

import (
	"bufio"
	"io"
	"sync"
)

// readerPool holds the read buffers of ended subgroup streams: a track
// that opens a stream per group would otherwise allocate one for each.
var readerPool sync.Pool

// getReader returns a read buffer over r, from readerPool if it has one.
func getReader(r io.Reader) *bufio.Reader {
	if br, ok := readerPool.Get().(*bufio.Reader); ok {
		br.Reset(r)
		return br
	}
	return bufio.NewReader(r)
}

// putReader returns br to readerPool, holding on to nothing it read.
func putReader(br *bufio.Reader) {
	br.Reset(nil)
	readerPool.Put(br)
}
