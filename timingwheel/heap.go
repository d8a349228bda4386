package timingwheel

// The far heap: a 4-ary min-heap of node indexes ordered by (due, seq).
// Each node in the heap keeps its position in node.prev.

func (w *Wheel[V]) heapLess(a, b int32) bool {
	na, nb := w.slab.at(a), w.slab.at(b)
	if na.due != nb.due {
		return na.due < nb.due
	}
	return int32(na.seq-nb.seq) < 0
}

func (w *Wheel[V]) heapSet(pos int, i int32) {
	w.heap[pos] = i
	w.slab.at(i).prev = int32(pos)
}

func (w *Wheel[V]) heapPush(i int32, n *node[V]) {
	n.next = inHeap
	w.heap = append(w.heap, i)
	w.heapUp(len(w.heap)-1, i)
}

func (w *Wheel[V]) heapUp(pos int, i int32) {
	for pos > 0 {
		parent := (pos - 1) / 4
		p := w.heap[parent]
		if !w.heapLess(i, p) {
			break
		}
		w.heapSet(pos, p)
		pos = parent
	}
	w.heapSet(pos, i)
}

func (w *Wheel[V]) heapDown(pos int, i int32) {
	n := len(w.heap)
	for {
		first := 4*pos + 1
		if first >= n {
			break
		}
		best, bi := first, w.heap[first]
		for c := first + 1; c < first+4 && c < n; c++ {
			if ci := w.heap[c]; w.heapLess(ci, bi) {
				best, bi = c, ci
			}
		}
		if !w.heapLess(bi, i) {
			break
		}
		w.heapSet(pos, bi)
		pos = best
	}
	w.heapSet(pos, i)
}

// purgeTop frees zombies at the top of the heap.
func (w *Wheel[V]) purgeTop() {
	for len(w.heap) > 0 {
		i := w.heap[0]
		if w.slab.at(i).next != zombie {
			return
		}
		w.heapRemove(0)
		w.zombies--
		w.slab.push(i)
	}
}

// compactHeap frees all zombies and restores the heap order in O(n).
func (w *Wheel[V]) compactHeap() {
	live := w.heap[:0]
	for _, i := range w.heap {
		if w.slab.at(i).next == zombie {
			w.slab.push(i)
			continue
		}
		live = append(live, i)
	}
	clear(w.heap[len(live):])
	w.heap = live
	w.zombies = 0
	for pos, i := range w.heap {
		w.slab.at(i).prev = int32(pos)
	}
	for pos := (len(w.heap) - 2) / 4; len(w.heap) > 1 && pos >= 0; pos-- {
		w.heapDown(pos, w.heap[pos])
	}
}

// heapRemove takes the node at position pos out of the heap.
func (w *Wheel[V]) heapRemove(pos int) {
	last := len(w.heap) - 1
	moved := w.heap[last]
	w.heap = w.heap[:last]
	if pos == last {
		return
	}
	if pos > 0 && w.heapLess(moved, w.heap[(pos-1)/4]) {
		w.heapUp(pos, moved)
	} else {
		w.heapDown(pos, moved)
	}
}
