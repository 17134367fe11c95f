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
	name := decor.Name(pipeline+" ", decor.WCSyncSpaceR)
	// Averages over the run so far: a moving average starts from zero and
	// showed "10.3 KiB/s 1h37m" in the first seconds of a 3-second run.
	speed := decor.AverageSpeed(decor.SizeB1024(0), "% .1f")
	if total > 0 {
		b.bar = b.p.AddBar(total,
			mpb.PrependDecorators(name, decor.CountersKibiByte("% .1f / % .1f")),
			mpb.AppendDecorators(speed, decor.Name(" "), decor.OnComplete(decor.AverageETA(decor.ET_STYLE_GO), "done")))
	} else {
		// The size is not known (a command's output): bytes, speed and time
		// so far, no pretend percentage.
		b.bar = b.p.New(0, mpb.SpinnerStyle(),
			mpb.PrependDecorators(name, decor.Current(decor.SizeB1024(0), "% .1f")),
			mpb.AppendDecorators(speed, decor.Name(" "), decor.Elapsed(decor.ET_STYLE_GO)))
	}
	b.stop, b.done = make(chan struct{}), make(chan struct{})
	src := r.Source()
	go func() {
		defer close(b.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-b.stop:
				n := src.BytesOut()
				if total <= 0 {
					b.bar.SetTotal(n, true)
				} else {
					b.bar.SetCurrent(n)
					b.bar.SetTotal(max(n, total), true)
				}
				return
			case <-t.C:
				b.bar.SetCurrent(src.BytesOut())
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
