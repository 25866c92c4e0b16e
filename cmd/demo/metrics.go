package main

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hybridlimit/hybridlimit/metrics"
	"github.com/hybridlimit/hybridlimit/metrics/gossipmetrics"
)

// serveMetrics serves every node's metrics at http://addr/metrics, each
// labelled node="node-N", until the returned func is called.
func serveMetrics(addr string, nodes []*demoNode) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	for _, n := range nodes {
		r := prometheus.WrapRegistererWith(prometheus.Labels{"node": n.name}, reg)
		if err := r.Register(metrics.NewCollector(n.l)); err != nil {
			return nil, err
		}
		if err := r.Register(gossipmetrics.NewCollector(n.g)); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }() // ErrServerClosed once stopped
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
