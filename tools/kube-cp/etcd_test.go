package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A reserved port cannot be taken by a listener of another program (Go's own
// sets SO_REUSEADDR, as Python's http.server does), and etcd's SO_REUSEPORT
// listener still binds it and gets the connections.
func TestReservedPortsAreEtcdsAlone(t *testing.T) {
	ports, release, err := reservePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	if ports[0] == ports[1] {
		t.Fatalf("one port twice: %v", ports)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	if l, err := net.Listen("tcp", addr); !errors.Is(err, syscall.EADDRINUSE) {
		if l != nil {
			l.Close()
		}
		t.Fatalf("another listener bound the reserved %s: %v", addr, err)
	}
	reuse := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
	}}
	etcdLike, err := reuse.Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatalf("a SO_REUSEPORT listener could not bind the reserved %s: %v", addr, err)
	}
	defer etcdLike.Close()
	release()
	for range 20 { // every connection reaches the listener, none the reservation
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		a, err := etcdLike.Accept()
		if err != nil {
			t.Fatal(err)
		}
		a.Close()
		c.Close()
	}
}

func TestEtcdStartsOnReservedPorts(t *testing.T) {
	e, clientURL, err := startEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c, err := net.Dial("tcp", clientURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
