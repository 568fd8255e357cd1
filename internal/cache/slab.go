package cache

// slab holds the payloads and properties of a Cache's entries, in blocks,
// so that caching an object costs no allocation of its own on the steady
// path. An entry names its bytes by block number and offset (dataRef), not
// by a slice: the entries hold no pointers, so the collector does not
// scan them, however many the Cache keeps.
//
// A block leaves the table once no entry refers to it any more. One a
// Cursor never returned a slice of is kept as the spare, to be the next
// shared block: a cache no fetch reads writes into the same few blocks,
// without the allocator zeroing new ones. One a Cursor returned a slice
// of is never reused, so that a slice returned never changes: it is
// collected once its caller drops it. Entries are evicted about in the
// order they came, so the blocks left half dead are few; the shared block
// grows with what the cache holds, so that even those and the spare stay
// small beside it.
type slab struct {
	// blocks are the blocks still referred to, by number from base on;
	// one whose entries all went is nil until those before it go too.
	blocks []block
	base   uint32
	// cur is the rest of the newest shared block, number curN; valid
	// when hasCur.
	cur    []byte
	curN   uint32
	hasCur bool
	// spare is a shared block that left the table unread, nil for none.
	spare []byte
}

// block is one block of storage and the entries referring to it.
type block struct {
	buf  []byte
	live int32
	read bool // a Cursor returned a slice of it: never reused
}

// dataRef is where an entry's bytes are: n bytes from off in block blk.
type dataRef struct {
	blk, off, n uint32
}

// Sizes of the shared blocks.
const (
	minByteBlock = 4 << 10
	maxByteBlock = 64 << 10
)

// alloc returns n bytes of storage, at full capacity so that no append
// reaches the next object's, and where they are. n is at most
// math.MaxUint32. held is what the cache holds now, in bytes: a new
// shared block is an eighth of it, within the bounds. What does not fit
// in a quarter of a block gets a block of its own, so that the end of a
// block left unused is less than a quarter of it.
func (s *slab) alloc(n int, held int64) ([]byte, dataRef) {
	if n == 0 {
		return nil, dataRef{}
	}
	if !s.hasCur || n > len(s.cur) {
		size := min(max(int(held/8), minByteBlock), maxByteBlock)
		if n > size/4 {
			b := make([]byte, n)
			r := dataRef{blk: s.push(b), n: uint32(n)}
			s.blocks[r.blk-s.base].live++
			return b, r
		}
		if s.hasCur {
			s.hasCur = false
			s.drop(s.curN) // the shared block it was may be dead already
		}
		if len(s.spare) == size {
			s.cur, s.spare = s.spare, nil
		} else {
			s.cur, s.spare = make([]byte, size), nil
		}
		s.curN, s.hasCur = s.push(s.cur), true
	}
	blk := &s.blocks[s.curN-s.base]
	off := len(blk.buf) - len(s.cur)
	b := s.cur[:n:n]
	s.cur = s.cur[n:]
	blk.live++
	return b, dataRef{blk: s.curN, off: uint32(off), n: uint32(n)}
}

// push adds b to the table and returns its number.
func (s *slab) push(b []byte) uint32 {
	s.blocks = append(s.blocks, block{buf: b})
	return s.base + uint32(len(s.blocks)-1)
}

// bytes returns the storage r names, to look at under the Cache's lock.
func (s *slab) bytes(r dataRef) []byte {
	if r.n == 0 {
		return nil
	}
	end := r.off + r.n
	return s.blocks[r.blk-s.base].buf[r.off:end:end]
}

// lend is bytes for a Cursor to return: r's block is never reused.
func (s *slab) lend(r dataRef) []byte {
	if r.n > 0 {
		s.blocks[r.blk-s.base].read = true
	}
	return s.bytes(r)
}

// release drops an entry's reference to r's block.
func (s *slab) release(r dataRef) {
	if r.n == 0 {
		return
	}
	s.blocks[r.blk-s.base].live--
	s.drop(r.blk)
}

// drop takes block k out of the table if nothing refers to it, and the
// blocks before it out with it.
func (s *slab) drop(k uint32) {
	b := &s.blocks[k-s.base]
	if b.live > 0 || (s.hasCur && k == s.curN) {
		return
	}
	if !b.read && len(b.buf) >= minByteBlock && len(b.buf) <= maxByteBlock {
		s.spare = b.buf // shared (or sized like one), never read
	}
	b.buf = nil
	for len(s.blocks) > 0 && s.blocks[0].buf == nil {
		s.blocks[0] = block{}
		s.blocks = s.blocks[1:]
		s.base++
	}
}
