// Package progress draws a one-line progress bar for long loads and runs.
//
// It owns the drawing only: the caller decides whether the output is a
// terminal (bars go to stderr, and only when it is one) and supplies the
// count. It must never write to stdout, where reports go.
package progress

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Bar redraws "label [####....] 45% 45000/100000 12.3k/s" in place until
// Finish. A nil *Bar is valid and draws nothing.
type Bar struct {
	w       io.Writer
	label   string
	total   int64
	current func() int64
	start   time.Time
	stop    chan struct{}
	wg      sync.WaitGroup
}

// Every is how often a bar is redrawn.
const Every = 200 * time.Millisecond

const width = 30

// Start begins drawing a bar on w that reads its progress from current
// (safe to call from another goroutine) against total. A nil w returns a
// nil Bar.
func Start(w io.Writer, label string, total int64, current func() int64) *Bar {
	if w == nil {
		return nil
	}
	b := &Bar{w: w, label: label, total: max(total, 1), current: current,
		start: time.Now(), stop: make(chan struct{})}
	b.wg.Go(b.loop)
	return b
}

func (b *Bar) loop() {
	t := time.NewTicker(Every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			b.draw()
		case <-b.stop:
			return
		}
	}
}

// Finish draws the final state and ends the line.
func (b *Bar) Finish() {
	if b == nil {
		return
	}
	close(b.stop)
	b.wg.Wait()
	b.draw()
	fmt.Fprintln(b.w)
}

func (b *Bar) draw() {
	fmt.Fprint(b.w, "\r"+Line(b.label, b.current(), b.total, time.Since(b.start))+"\x1b[K")
}

// Line renders one state of a bar.
func Line(label string, done, total int64, elapsed time.Duration) string {
	done = min(max(done, 0), total)
	filled := int(done * width / total)
	bar := strings.Repeat("#", filled) + strings.Repeat(".", width-filled)
	rate := ""
	if s := elapsed.Seconds(); s > 0 {
		rate = " " + human(float64(done)/s) + "/s"
	}
	return fmt.Sprintf("%s [%s] %3d%% %d/%d%s", label, bar, done*100/total, done, total, rate)
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
