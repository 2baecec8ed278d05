package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// procStatus reads a "kB" field of /proc/self/status (Linux) in bytes.
func procStatus(field string) (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		num := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB"))
		kb, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return -1, fmt.Errorf("parse %s: %w", field, err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return -1, err
	}
	return -1, fmt.Errorf("no %s in /proc/self/status", field)
}

// ioWritten is the number of bytes the process has passed to write
// syscalls (wchar in /proc/self/io): for SQLite, mostly WAL and checkpoint
// writes. -1 if unknown.
func ioWritten() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "wchar:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// peakRSS is the process's peak resident set size (VmHWM), -1 if unknown.
// It is process-wide: the Go runtime, the store's page cache inside the
// process, and anything the bench itself holds.
func peakRSS() int64 {
	v, _ := procStatus("VmHWM")
	return v
}

// currentRSS is the process's resident set size now (VmRSS), -1 if unknown.
func currentRSS() int64 {
	v, _ := procStatus("VmRSS")
	return v
}

// resetPeakRSS makes VmHWM restart from the current RSS (Linux: writing 5
// to clear_refs), so that each run reports its own peak. It reports whether
// that worked; if not, peaks are since the process started.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// settle collects garbage and returns freed memory to the OS so that RSS
// readings show what is still live.
func settle() {
	runtime.GC()
	debug.FreeOSMemory()
}

// sampler records the highest goroutine count and RSS seen while it runs.
type sampler struct {
	maxG   atomic.Int64
	maxRSS atomic.Int64
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

func startSampler(every time.Duration) *sampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sampler{stop: cancel}
	s.take()
	s.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.take()
			}
		}
	})
	return s
}

func (s *sampler) take() {
	if g := int64(runtime.NumGoroutine()); g > s.maxG.Load() {
		s.maxG.Store(g)
	}
	if r := currentRSS(); r > s.maxRSS.Load() {
		s.maxRSS.Store(r)
	}
}

// Stop ends sampling and returns the peaks.
func (s *sampler) Stop() (goroutines int, rss int64) {
	s.stop()
	s.wg.Wait()
	s.take()
	return int(s.maxG.Load()), s.maxRSS.Load()
}

// waitGoroutines polls runtime.NumGoroutine until it is at most limit or
// ctx ends; it returns the last count.
func waitGoroutines(ctx context.Context, limit int) int {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		g := runtime.NumGoroutine()
		if g <= limit {
			return g
		}
		select {
		case <-ctx.Done():
			return g
		case <-t.C:
		}
	}
}
