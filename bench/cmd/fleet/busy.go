package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
)

// busyArg is the hidden first argument that makes this binary burn CPU
// (-busy), to mimic a machine busy with other work.
const busyArg = "busy"

// busyMain spins -n loops until SIGTERM, SIGINT or the end of -life.
func busyMain(args []string) error {
	fs := flag.NewFlagSet("fleet busy", flag.ContinueOnError)
	n := fs.Int("n", 1, "loops")
	life := fs.Duration("life", 10*time.Minute, "exit after this long whatever happens")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 {
		return fmt.Errorf("-n must be at least 1, got %d", *n)
	}
	runtime.GOMAXPROCS(*n + 1)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *life)
	defer cancel()
	for range *n {
		go spin(ctx)
	}
	<-ctx.Done()
	return nil
}

// spin burns CPU until ctx is done, looking at ctx every few million
// steps.
func spin(ctx context.Context) {
	x := uint64(1)
	for ctx.Err() == nil {
		for range 1 << 22 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	sink.Store(x)
}

// sink keeps spin's arithmetic from being optimised away.
var sink atomic.Uint64
