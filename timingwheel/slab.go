package timingwheel

// pageBits sizes the slab's pages: 1,024 nodes, 32 KiB.
const (
	pageBits = 10
	pageSize = 1 << pageBits
)

// slab holds the nodes in pages of a fixed size, so that a growing index never copies them and
// holds at most one page of nodes it has no use for (a slice grown by append can hold a quarter
// more than it uses, and twice as much while it is copied).
type slab struct {
	pages [][]node
	len   int32 // nodes handed out
}

func (s *slab) at(i int32) *node { return &s.pages[i>>pageBits][i&(pageSize-1)] }

// add returns a new node's index.
func (s *slab) add() int32 {
	if int(s.len)>>pageBits == len(s.pages) {
		s.pages = append(s.pages, make([]node, pageSize))
	}
	s.len++
	return s.len - 1
}

// reset drops every node, keeping the first page.
func (s *slab) reset() {
	keep := min(1, len(s.pages))
	clear(s.pages[keep:]) // let the other pages go
	s.pages, s.len = s.pages[:keep], 0
}
