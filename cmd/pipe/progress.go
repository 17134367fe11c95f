package main

import (
	"io"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/pipebackup/pipe/engine"
)

// progressBar shows bytes read from the source, live, on a terminal.
type progressBar struct {
	w    io.Writer
	p    *mpb.Progress
	bar  *mpb.Bar
	stop chan struct{}
	done chan struct{}
}

func newProgressBar(w io.Writer) *progressBar { return &progressBar{w: w} }

func (b *progressBar) Start(pipeline string, total int64, r *engine.Run) {
	b.p = mpb.New(mpb.WithOutput(b.w), mpb.WithRefreshRate(150*time.Millisecond), mpb.WithAutoRefresh())
	barTotal := total
	if barTotal <= 0 {
		barTotal = 0 // unknown: the bar grows with the data
	}
	b.bar = b.p.AddBar(barTotal,
		mpb.PrependDecorators(decor.Name(pipeline+" ", decor.WCSyncSpaceR), decor.CountersKibiByte("% .1f / % .1f")),
		mpb.AppendDecorators(decor.EwmaSpeed(decor.SizeB1024(0), "% .1f", 30), decor.Name(" "), decor.OnComplete(decor.EwmaETA(decor.ET_STYLE_GO, 30), "done")),
	)
	b.stop, b.done = make(chan struct{}), make(chan struct{})
	src := r.Source()
	go func() {
		defer close(b.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		last, lastT := int64(0), time.Now()
		for {
			select {
			case <-b.stop:
				n := src.BytesOut()
				if total <= 0 {
					b.bar.SetTotal(n, true)
				} else {
					b.bar.EwmaSetCurrent(n, time.Since(lastT))
					b.bar.SetTotal(max(n, total), true)
				}
				return
			case <-t.C:
				n := src.BytesOut()
				if total <= 0 {
					b.bar.SetTotal(n+1, false)
				}
				b.bar.EwmaSetCurrent(n, time.Since(lastT))
				last, lastT = n, time.Now()
				_ = last
			}
		}
	}()
}

func (b *progressBar) Stop() {
	close(b.stop)
	<-b.done
	b.bar.Abort(false)
	b.p.Wait()
}
