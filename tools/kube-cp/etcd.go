package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"golang.org/x/sys/unix"
)

// etcdTries bounds the starts on fresh ports: a port lost once is bad luck,
// three times in a row something else.
const etcdTries = 3

// startEtcd starts the embedded etcd on two ports of 127.0.0.1 and returns it
// with its client URL. Embedded etcd takes no listeners: it binds the URLs of
// its Config itself (go.etcd.io/etcd/server/v3 v3.6.4 embed/etcd.go:580 and
// :708, transport.NewListenerWithOpts). So the ports stay reserved until it
// has bound them (reservePorts), and a start that still meets "address already
// in use" is tried again on fresh ports, saying why. Both listeners are made
// before etcd writes anything to dataDir (etcd.go:142-151, then :160-166), so
// a retry starts from the same empty directory.
func startEtcd(dataDir string) (*embed.Etcd, *url.URL, error) {
	for try := 1; ; try++ {
		ports, release, err := reservePorts(2)
		if err != nil {
			return nil, nil, fmt.Errorf("etcd ports: %w", err)
		}
		cfg := embed.NewConfig()
		cfg.Name = "kube-cp"
		cfg.Dir = dataDir
		cfg.LogLevel = "error"
		clientURL, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", ports[0]))
		peerURL, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", ports[1]))
		cfg.ListenClientUrls = []url.URL{*clientURL}
		cfg.AdvertiseClientUrls = []url.URL{*clientURL}
		cfg.ListenPeerUrls = []url.URL{*peerURL}
		cfg.AdvertisePeerUrls = []url.URL{*peerURL}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		// SO_REUSEPORT on etcd's listeners lets them bind the ports reservePorts
		// holds (transport/sockopt.go:51-52 adds it to the listen controls).
		cfg.SocketOpts.ReusePort = true
		e, err := embed.StartEtcd(cfg)
		release()
		if err == nil {
			select {
			case <-e.Server.ReadyNotify():
				return e, clientURL, nil
			case <-time.After(60 * time.Second):
				e.Close()
				return nil, nil, fmt.Errorf("etcd not ready after 60s")
			}
		}
		// The listener's error comes back unwrapped (etcd.go:580-585, :708-711).
		if !errors.Is(err, syscall.EADDRINUSE) || try == etcdTries {
			return nil, nil, fmt.Errorf("etcd: %w", err)
		}
		fmt.Fprintf(os.Stderr, "kube-cp: etcd: %v (start %d of %d); again on fresh ports\n", err, try, etcdTries)
	}
}

// reservePorts holds n distinct ports of 127.0.0.1 until release is called:
// sockets bound with SO_REUSEPORT and never listening. While they are held,
// no other socket can bind those ports unless it sets SO_REUSEPORT too under
// the same user (socket(7), SO_REUSEPORT); a port chosen with :0 (bind or an
// outgoing connection's source port) is never one of them. Not listening, they
// take no connections: those go to etcd's listeners. Linux's bind conflict
// rules: net/ipv4/inet_connection_sock.c inet_bind_conflict().
func reservePorts(n int) (ports []int, release func(), err error) {
	var fds []int
	release = func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	for range n {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			release()
			return nil, nil, err
		}
		fds = append(fds, fd)
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			release()
			return nil, nil, err
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			release()
			return nil, nil, err
		}
		sa, err := unix.Getsockname(fd)
		if err != nil {
			release()
			return nil, nil, err
		}
		ports = append(ports, sa.(*unix.SockaddrInet4).Port)
	}
	return ports, release, nil
}
