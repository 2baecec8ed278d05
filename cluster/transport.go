package cluster

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// errPartitioned is what dials fail with while the node is cut off or
// shutting down.
var errPartitioned = errors.New("cluster: node is partitioned or shut down")

// cuttable wraps memberlist's network transport. It tells heard the
// sender of every packet that comes in, which is how the node knows whom
// it still hears from directly. And it lets tests cut the node off: while
// partitioned is set, it drops the node's gossip packets and refuses its
// stream connections, both ways.
type cuttable struct {
	inner       *memberlist.NetTransport
	partitioned *atomic.Bool
	heard       func(from string)

	packets chan *memberlist.Packet
	streams chan net.Conn

	done     chan struct{} // closed when Shutdown starts
	innerOff chan struct{} // closed once inner.Shutdown returned
	wg       sync.WaitGroup
	once     sync.Once
}

var _ memberlist.NodeAwareTransport = (*cuttable)(nil)

func newCuttable(inner *memberlist.NetTransport, partitioned *atomic.Bool, heard func(from string)) *cuttable {
	t := &cuttable{
		inner:       inner,
		partitioned: partitioned,
		heard:       heard,
		packets:     make(chan *memberlist.Packet),
		streams:     make(chan net.Conn),
		done:        make(chan struct{}),
		innerOff:    make(chan struct{}),
	}
	t.wg.Add(2)
	go t.forwardPackets()
	go t.forwardStreams()
	return t
}

func (t *cuttable) forwardPackets() {
	defer t.wg.Done()
	for {
		select {
		case p := <-t.inner.PacketCh():
			if t.partitioned.Load() {
				continue
			}
			t.heard(p.From.String())
			select {
			case t.packets <- p:
			case <-t.done:
			}
		case <-t.done:
			// The inner transport's listener may still be handing over a
			// packet; take it, or its Shutdown would wait forever.
			for {
				select {
				case <-t.inner.PacketCh():
				case <-t.innerOff:
					return
				}
			}
		}
	}
}

func (t *cuttable) forwardStreams() {
	defer t.wg.Done()
	for {
		select {
		case c := <-t.inner.StreamCh():
			if t.partitioned.Load() {
				_ = c.Close()
				continue
			}
			select {
			case t.streams <- c:
			case <-t.done:
				_ = c.Close()
			}
		case <-t.done:
			for {
				select {
				case c := <-t.inner.StreamCh():
					_ = c.Close()
				case <-t.innerOff:
					return
				}
			}
		}
	}
}

func (t *cuttable) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return t.inner.FinalAdvertiseAddr(ip, port)
}

func (t *cuttable) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.partitioned.Load() {
		return time.Now(), nil // lost on the way, as UDP may be
	}
	return t.inner.WriteTo(b, addr)
}

func (t *cuttable) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	if t.partitioned.Load() {
		return time.Now(), nil
	}
	return t.inner.WriteToAddress(b, addr)
}

func (t *cuttable) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *cuttable) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.partitioned.Load() || t.closing() {
		return nil, errPartitioned
	}
	return t.inner.DialTimeout(addr, timeout)
}

func (t *cuttable) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.partitioned.Load() || t.closing() {
		return nil, errPartitioned
	}
	return t.inner.DialAddressTimeout(addr, timeout)
}

func (t *cuttable) StreamCh() <-chan net.Conn { return t.streams }

// closing tells whether Shutdown started: a rejoin racing Close must not
// reach out to other nodes any more.
func (t *cuttable) closing() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// Shutdown stops the inner transport and the forwarders. Memberlist calls
// it from its own Shutdown; Close calls it too for a memberlist that was
// never created, hence the once.
func (t *cuttable) Shutdown() error {
	var err error
	t.once.Do(func() {
		close(t.done)
		err = t.inner.Shutdown()
		close(t.innerOff)
		t.wg.Wait()
	})
	return err
}
