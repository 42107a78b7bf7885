package main

import (
	"fmt"
	"net"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/zpages/flagz"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apioptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// listenAPI binds the API server's port once, here, and keeps it: the listener is
// handed to kube-apiserver (runAPIServer), so the port is never free between
// being chosen, written into the kubeconfig and served (issue 42: a port picked
// with :0, released and bound seconds later was taken by another process).
func listenAPI(port int) (net.Listener, error) {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver port: %w", err)
	}
	return l, nil
}

// runAPIServer runs kube-apiserver with args on the listener l. It does what
// NewAPIServerCommand's RunE does (k8s.io/kubernetes v1.34.3
// cmd/kube-apiserver/app/server.go:70-145), which keeps its options out of
// reach, and sets SecureServingOptions.Listener, which ApplyTo serves as given
// instead of binding BindAddress:BindPort (k8s.io/apiserver v0.34.3
// pkg/server/options/serving.go:55-58, :232-258). --secure-port must still name
// the port: Validate refuses 0 for kube-apiserver (serving.go:137-138).
// Like the command, it installs the process's signal handler
// (genericapiserver.SetupSignalContext, allowed once per process).
func runAPIServer(args []string, l net.Listener) error {
	s := apioptions.NewServerRunOptions()
	ctx := genericapiserver.SetupSignalContext()
	featureGate := s.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)

	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	namedFlagSets := s.Flags()
	s.Flagz = flagz.NamedFlagSetsReader{FlagSets: namedFlagSets}
	globalflag.AddGlobalFlags(namedFlagSets.FlagSet("global"), "kube-apiserver", logs.SkipLoggingConfigurationFlags())
	for _, f := range namedFlagSets.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("flags: %w", err)
	}
	// The command's PersistentPreRunE (server.go:84-92).
	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	// Its RunE (server.go:93-117), with the listener.
	if err := logsapi.ValidateAndApply(s.Logs, featureGate); err != nil {
		return err
	}
	s.SecureServing.Listener = l
	completed, err := s.Complete(ctx)
	if err != nil {
		return err
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return utilerrors.NewAggregate(errs)
	}
	featureGate.(featuregate.MutableFeatureGate).AddMetrics()
	s.GenericServerRunOptions.ComponentGlobalsRegistry.AddMetrics()
	return apiserver.Run(ctx, completed)
}
