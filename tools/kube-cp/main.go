// kube-cp runs a small real Kubernetes control plane in one process, on
// 127.0.0.1, for spottrain's tests: an embedded etcd, kube-apiserver,
// kube-controller-manager (a few controllers, no node-lifecycle controller so
// API-created nodes stay Ready) and kube-scheduler, all from upstream source.
//
// It writes certificates and an admin kubeconfig into --cert-dir and prints
// one line "READY kubeconfig=<path> server=<url>" once /readyz answers ok.
package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

// Controllers kube-cp runs. node-lifecycle-controller is left out on
// purpose: nothing then marks the API-created nodes NotReady. The
// taint-eviction controller looks pods up by the informer index
// "spec.nodeName" but does not add it; the node-lifecycle and daemonset
// controllers do (pkg/controller/nodelifecycle/node_lifecycle_controller.go:390,
// pkg/controller/daemon/daemon_controller.go:219). Without either it evicts
// nothing ("Index with name spec.nodeName does not exist",
// taint_eviction.go:569), so the daemonset controller runs too (no DaemonSets).
// The pod garbage collector marks a pod whose Node object is gone Failed with
// DisruptionTarget/DeletionByPodGC and deletes it, 40 s after it first saw the
// node missing (pkg/controller/podgc/gc_controller.go:51, :222-258): a VM that
// vanished with its node.
const controllers = "job-controller,garbage-collector-controller," +
	"ttl-after-finished-controller,taint-eviction-controller,daemonset-controller," +
	"serviceaccount-token-controller,serviceaccount-controller," +
	"pod-garbage-collector-controller"

func main() {
	dataDir := flag.String("data-dir", "", "etcd data directory (required)")
	certDir := flag.String("cert-dir", "", "directory for certificates and admin.kubeconfig (required)")
	port := flag.Int("port", 0, "kube-apiserver secure port on 127.0.0.1 (0: pick a free one)")
	verbosity := flag.String("log-v", "0", "klog verbosity for the Kubernetes components")
	flag.Parse()
	if *dataDir == "" || *certDir == "" {
		fmt.Fprintln(os.Stderr, "kube-cp: --data-dir and --cert-dir are required")
		os.Exit(2)
	}
	if err := run(*dataDir, *certDir, *port, *verbosity); err != nil {
		fmt.Fprintln(os.Stderr, "kube-cp:", err)
		os.Exit(1)
	}
}

func run(dataDir, certDir string, port int, verbosity string) error {
	for _, d := range []string{dataDir, certDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	// The API server's port is bound here and handed over (apiserver.go), before
	// the kubeconfig names it; etcd's are reserved until etcd binds them (etcd.go).
	apiListener, err := listenAPI(port)
	if err != nil {
		return err
	}
	port = apiListener.Addr().(*net.TCPAddr).Port
	server := fmt.Sprintf("https://127.0.0.1:%d", port)
	files, err := writeCerts(certDir, server)
	if err != nil {
		apiListener.Close()
		return fmt.Errorf("certificates: %w", err)
	}

	// etcd, embedded.
	etcd, clientURL, err := startEtcd(dataDir)
	if err != nil {
		apiListener.Close()
		return err
	}
	defer etcd.Close()

	errc := make(chan error, 3)

	// kube-controller-manager's command is built first: building its flags turns
	// the WatchListClient feature gate on (options.go:301-306), which the shared
	// feature gate refuses once the apiserver's flags have added the gates to a
	// flag set ("gates already added to a flag set").
	kcmOpts, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return fmt.Errorf("kube-controller-manager options: %w", err)
	}
	kcmFlags := kcmOpts.Flags(kcm.KnownControllers(), kcm.ControllersDisabledByDefault(), kcm.ControllerAliases())
	kcmOpts.ParsedFlags = &kcmFlags

	// kube-apiserver, serving on apiListener.
	apiArgs := []string{
		"--etcd-servers=" + clientURL.String(),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + certDir,
		"--tls-cert-file=" + files.servingCert,
		"--tls-private-key-file=" + files.servingKey,
		"--client-ca-file=" + files.caCert,
		"--service-account-key-file=" + files.saPub,
		"--service-account-signing-key-file=" + files.saKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=RBAC",
		"--allow-privileged=true",
		// 127.0.0.1 may not be an Endpoints address: keep the "kubernetes"
		// Service without endpoints instead of failing to sync it.
		"--endpoint-reconciler-type=none",
		"--v=" + verbosity,
	}
	go func() { errc <- fmt.Errorf("kube-apiserver exited: %v", runAPIServer(apiArgs, apiListener)) }()

	if err := waitReady(server, files, errc); err != nil {
		return err
	}

	// kube-controller-manager: its command's RunE applies the logging
	// configuration again (refused once the apiserver applied it), so parse its
	// flags and run its Config and Run directly, as that RunE does.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kfs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	for _, f := range kcmFlags.FlagSets {
		kfs.AddFlagSet(f)
	}
	if err := kfs.Parse([]string{
		"--kubeconfig=" + files.kubeconfig,
		"--controllers=" + controllers,
		"--service-account-private-key-file=" + files.saKey,
		"--root-ca-file=" + files.caCert,
		"--use-service-account-credentials=false",
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		// 0: no port at all, nothing to race for (k8s.io/apiserver v0.34.3
		// pkg/server/options/serving.go:228-230); the scheduler's likewise.
		"--secure-port=0",
	}); err != nil {
		return fmt.Errorf("kube-controller-manager flags: %w", err)
	}
	go func() {
		c, err := kcmOpts.Config(ctx, kcm.KnownControllers(), kcm.ControllersDisabledByDefault(), kcm.ControllerAliases())
		if err != nil {
			errc <- fmt.Errorf("kube-controller-manager config: %w", err)
			return
		}
		errc <- fmt.Errorf("kube-controller-manager exited: %v", kcm.Run(ctx, c.Complete()))
	}()

	// kube-scheduler: its command would call server.SetupSignalHandler a
	// second time (that panics), so run its Setup and Run directly.
	opts := scheduleroptions.NewOptions()
	fs := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
	for _, f := range opts.Flags.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse([]string{
		"--kubeconfig=" + files.kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=0",
	}); err != nil {
		return fmt.Errorf("kube-scheduler flags: %w", err)
	}
	go func() {
		cc, sched, err := scheduler.Setup(ctx, opts)
		if err != nil {
			errc <- fmt.Errorf("kube-scheduler setup: %w", err)
			return
		}
		errc <- fmt.Errorf("kube-scheduler exited: %v", scheduler.Run(ctx, cc, sched))
	}()

	fmt.Printf("READY kubeconfig=%s server=%s\n", files.kubeconfig, server)
	os.Stdout.Sync()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case err := <-errc:
		return err
	case <-sig:
		return nil
	}
}

// waitReady polls /readyz until it answers ok; a component that exits meanwhile
// ends the wait at once, with its error (not 120 s later).
func waitReady(server string, files certFiles, errc <-chan error) error {
	cert, err := tls.LoadX509KeyPair(files.adminCert, files.adminKey)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(files.caCert)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}},
	}
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := client.Get(server + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-errc:
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("kube-apiserver /readyz not ok after 120s")
}

type certFiles struct {
	caCert, servingCert, servingKey, adminCert, adminKey, saKey, saPub, kubeconfig string
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

func newKey() (*rsa.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 2048) }

var serial int64 = 1

func sign(tmpl *x509.Certificate, pub any, parent *x509.Certificate, parentKey *rsa.PrivateKey) ([]byte, error) {
	serial++
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * 365 * time.Hour)
	if parent == nil {
		parent = tmpl
	}
	return x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
}

// writeCerts makes a CA, a serving cert for 127.0.0.1, an admin client cert
// (O=system:masters), a service-account signing key and admin.kubeconfig.
func writeCerts(dir, server string) (certFiles, error) {
	f := certFiles{
		caCert:      filepath.Join(dir, "ca.crt"),
		servingCert: filepath.Join(dir, "apiserver.crt"),
		servingKey:  filepath.Join(dir, "apiserver.key"),
		adminCert:   filepath.Join(dir, "admin.crt"),
		adminKey:    filepath.Join(dir, "admin.key"),
		saKey:       filepath.Join(dir, "sa.key"),
		saPub:       filepath.Join(dir, "sa.pub"),
		kubeconfig:  filepath.Join(dir, "admin.kubeconfig"),
	}
	caKey, err := newKey()
	if err != nil {
		return f, err
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "kube-cp-ca"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	caDER, err := sign(caTmpl, &caKey.PublicKey, nil, caKey)
	if err != nil {
		return f, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return f, err
	}
	if err := writePEM(f.caCert, "CERTIFICATE", caDER); err != nil {
		return f, err
	}

	leaf := func(certPath, keyPath string, tmpl *x509.Certificate) error {
		key, err := newKey()
		if err != nil {
			return err
		}
		der, err := sign(tmpl, &key.PublicKey, ca, caKey)
		if err != nil {
			return err
		}
		if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(keyPath, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
	}
	if err := leaf(f.servingCert, f.servingKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}); err != nil {
		return f, err
	}
	if err := leaf(f.adminCert, f.adminKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-cp-admin", Organization: []string{"system:masters"}},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return f, err
	}

	saKey, err := newKey()
	if err != nil {
		return f, err
	}
	if err := writePEM(f.saKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)); err != nil {
		return f, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return f, err
	}
	if err := writePEM(f.saPub, "PUBLIC KEY", pubDER); err != nil {
		return f, err
	}

	kubeconfig := strings.Join([]string{
		"apiVersion: v1",
		"kind: Config",
		"clusters:",
		"- name: kube-cp",
		"  cluster:",
		"    server: " + server,
		"    certificate-authority: " + f.caCert,
		"users:",
		"- name: admin",
		"  user:",
		"    client-certificate: " + f.adminCert,
		"    client-key: " + f.adminKey,
		"contexts:",
		"- name: kube-cp",
		"  context: {cluster: kube-cp, user: admin}",
		"current-context: kube-cp",
		"",
	}, "\n")
	return f, os.WriteFile(f.kubeconfig, []byte(kubeconfig), 0o600)
}
