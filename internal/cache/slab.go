package cache

// slab hands out a Cache's entries and the storage of their payloads and
// properties in blocks, so that caching an object costs no allocation of
// its own on the steady path. Nothing handed out is ever reused: a block
// is collected once no entry in it is referenced any more. Entries are
// evicted about in the order they came, so what dead entries keep alive
// is about one block of each kind; the payload block grows with what the
// cache holds, so that even that stays small beside it.
type slab struct {
	entries []entry
	buf     []byte
}

// Sizes of the blocks: entries a block, and the payload block's bounds.
const (
	entryBlock   = 32
	minByteBlock = 4 << 10
	maxByteBlock = 64 << 10
)

// entry returns a zero entry.
func (s *slab) entry() *entry {
	if len(s.entries) == 0 {
		s.entries = make([]entry, entryBlock)
	}
	e := &s.entries[0]
	s.entries = s.entries[1:]
	return e
}

// bytes returns n bytes of storage, at full capacity so that no append
// reaches the next object's. held is what the cache holds now, in bytes:
// a new block is an eighth of it, within the bounds. What does not fit in
// a quarter of a block gets storage of its own, so that the end of a
// block left unused is less than a quarter of it.
func (s *slab) bytes(n int, held int64) []byte {
	if n > len(s.buf) {
		size := min(max(int(held/8), minByteBlock), maxByteBlock)
		if n > size/4 {
			return make([]byte, n)
		}
		s.buf = make([]byte, size)
	}
	b := s.buf[:n:n]
	s.buf = s.buf[n:]
	return b
}
