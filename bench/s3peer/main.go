// s3peer: a reference S3 load loop on a registry S3 client library, for
// bench/s3_vs_clients.py to compare fathom-engine with. -client minio runs it
// on minio-go v7 (warp's client library), -client aws on aws-sdk-go-v2.
//
// Both are set up like a benchmark: UNSIGNED-PAYLOAD (no body hashing), no
// multipart, no retries, path-style requests, one keep-alive connection per
// worker. Each of -concurrent workers makes one request untimed (opening its
// connection), then all run PUT or GET for -duration. PUTs cycle over
// -objects keys <prefix>/0/<n>; GETs read those keys at random (the set an
// earlier PUT left, e.g. fathom-engine's). Prints one JSON line:
// {"client","op","ops","errors","bytes","seconds","requests","first_error"}:
// ops, errors and bytes of the requests that ended within the timed
// -duration (seconds), and requests: every request the process completed
// (untimed first ones and those that ended after the deadline included), the
// divisor for the whole process's CPU per request.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/minio/minio-go/v7"
	miniocreds "github.com/minio/minio-go/v7/pkg/credentials"
)

type keys struct {
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
	Endpoint  string `json:"endpoint"`
	Region    string `json:"region"`
}

// one request: PUT (body) or GET (discarded) of key; returns the bytes moved
type doer func(ctx context.Context, key string) (int64, error)

func transport(conns int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = conns
	t.MaxIdleConnsPerHost = conns
	t.MaxConnsPerHost = conns
	t.DisableCompression = true
	return t
}

func minioDoer(k keys, u *url.URL, op, bucket string, body []byte, conns int) (doer, error) {
	minio.MaxRetry = 1 // no hidden retries: an error is an error
	c, err := minio.New(u.Host, &minio.Options{
		Creds:        miniocreds.NewStaticV4(k.AccessKey, k.SecretKey, ""),
		Secure:       u.Scheme == "https",
		Region:       k.Region,
		BucketLookup: minio.BucketLookupPath,
		Transport:    transport(conns),
	})
	if err != nil {
		return nil, err
	}
	if op == "put" {
		// warp's --disable-sha256-payload --disable-multipart
		opts := minio.PutObjectOptions{DisableContentSha256: true, DisableMultipart: true}
		return func(ctx context.Context, key string) (int64, error) {
			info, err := c.PutObject(ctx, bucket, key, bytes.NewReader(body), int64(len(body)), opts)
			return info.Size, err
		}, nil
	}
	return func(ctx context.Context, key string) (int64, error) {
		o, err := c.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
		if err != nil {
			return 0, err
		}
		defer o.Close()
		return io.Copy(io.Discard, o)
	}, nil
}

func awsDoer(k keys, u *url.URL, op, bucket string, body []byte, conns int) (doer, error) {
	hc := awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns = conns
		t.MaxIdleConnsPerHost = conns
		t.MaxConnsPerHost = conns
		t.DisableCompression = true
	})
	c := s3.New(s3.Options{
		Region:       k.Region,
		BaseEndpoint: aws.String(u.String()),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(k.AccessKey, k.SecretKey, ""),
		HTTPClient:   hc,
		Retryer:      aws.NopRetryer{},
		// no CRC trailers (aws-chunked): a plain PUT, as the other clients send
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	if op == "put" {
		unsigned := func(o *s3.Options) {
			o.APIOptions = append(o.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
		}
		return func(ctx context.Context, key string) (int64, error) {
			_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(body),
				ContentLength: aws.Int64(int64(len(body)))}, unsigned)
			if err != nil {
				return 0, err
			}
			return int64(len(body)), nil
		}, nil
	}
	return func(ctx context.Context, key string) (int64, error) {
		out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
		if err != nil {
			return 0, err
		}
		defer out.Body.Close()
		return io.Copy(io.Discard, out.Body)
	}, nil
}

func main() {
	client := flag.String("client", "minio", "minio (minio-go v7) or aws (aws-sdk-go-v2)")
	op := flag.String("op", "put", "put or get")
	keysFile := flag.String("keys-file", "", "JSON with access_key, secret_key, endpoint, region")
	endpoint := flag.String("endpoint", "", "http(s)://host:port (default: the keys file's)")
	bucket := flag.String("bucket", "", "bucket")
	prefix := flag.String("prefix", "", "keys are <prefix>/0/<n>")
	size := flag.Int("size", 64<<10, "object size (put)")
	objects := flag.Int("objects", 64, "keys 0..objects-1")
	conc := flag.Int("concurrent", 16, "workers, one connection each")
	duration := flag.Duration("duration", 10*time.Second, "timed run")
	flag.Parse()

	raw, err := os.ReadFile(*keysFile)
	if err != nil {
		fail("keys file: %v", err)
	}
	var k keys
	if err := json.Unmarshal(raw, &k); err != nil {
		fail("keys file %s is not JSON", *keysFile)
	}
	if *endpoint != "" {
		k.Endpoint = *endpoint
	}
	if k.Region == "" {
		k.Region = "us-east-1"
	}
	u, err := url.Parse(k.Endpoint)
	if err != nil || u.Host == "" {
		fail("endpoint %q", k.Endpoint)
	}
	var body []byte
	if *op == "put" {
		body = make([]byte, *size)
		_, _ = rand.Read(body)
	}
	var do doer
	switch *client {
	case "minio":
		do, err = minioDoer(k, u, *op, *bucket, body, *conc)
	case "aws":
		do, err = awsDoer(k, u, *op, *bucket, body, *conc)
	default:
		fail("-client %q: use minio or aws", *client)
	}
	if err != nil {
		fail("client: %v", err)
	}

	var ops, errs, nbytes, requests atomic.Int64
	var firstErr atomic.Value
	var warm, done sync.WaitGroup
	start := make(chan struct{})
	var t0 time.Time
	var stop atomic.Bool
	ctx := context.Background()
	key := func(n int) string { return fmt.Sprintf("%s/0/%d", *prefix, n) }
	for w := 0; w < *conc; w++ {
		warm.Add(1)
		done.Add(1)
		go func(w int) {
			defer done.Done()
			rng := mrand.New(mrand.NewPCG(uint64(w), 7))
			next := w
			pick := func() int {
				if *op == "get" {
					return rng.IntN(*objects)
				}
				n := next % *objects
				next += *conc
				return n
			}
			_, err := do(ctx, key(pick()))
			requests.Add(1)
			warm.Done()
			if err != nil {
				firstErr.CompareAndSwap(nil, err.Error())
			}
			<-start
			for !stop.Load() {
				n, err := do(ctx, key(pick()))
				requests.Add(1)
				if stop.Load() {
					break // ended after the deadline: not counted, as the engine's duration bound
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ops.Add(1)
				nbytes.Add(n)
			}
		}(w)
	}
	warm.Wait()
	if e := firstErr.Load(); e != nil {
		fail("first request failed: %s", e)
	}
	t0 = time.Now()
	close(start)
	time.Sleep(*duration)
	stop.Store(true)
	secs := time.Since(t0).Seconds()
	done.Wait()
	fe, _ := firstErr.Load().(string)
	out, _ := json.Marshal(map[string]any{"client": *client, "op": *op, "ops": ops.Load(), "errors": errs.Load(),
		"bytes": nbytes.Load(), "seconds": secs, "requests": requests.Load(), "first_error": fe})
	fmt.Println(string(out))
}

func fail(f string, a ...any) {
	fmt.Fprintln(os.Stderr, "s3peer: "+fmt.Sprintf(f, a...))
	os.Exit(1)
}
