// Package config reads sluice's policy file: the YAML file that
// cmd/worker and cmd/enqueue load to learn the queue's bounds, the
// third-party APIs that jobs call and how fast the whole fleet may call
// them, and how each tenant is admitted at enqueue time.
//
// [Load] reads and parses a file, [Parse] a file's contents; both return
// a [Config] with every default filled in, or an [ErrorList] that names the
// line, column and field of each problem. [Config.TenantPolicy] finds a
// tenant's entry and [Config.DownstreamFor] the downstream that a URL
// belongs to. docs/policy.md holds this same reference with a longer
// example.
//
// # Example
//
//	queue:
//	  name: default            # asynq queue name
//	  bound: 100000            # most jobs waiting, not yet started (required)
//	  tenant_bound: 10000      # most jobs waiting per tenant; 0 = no bound
//	  prefetch: 64             # most tasks in asynq's pending list
//	  max_payload: 1MiB        # largest job payload
//	  retention: 0s            # how long asynq keeps completed jobs (0s: not kept)
//
//	downstreams:
//	  shopify:
//	    base_url: https://example.myshopify.com/admin/api/
//	    rate: 2                # 2 calls per second...
//	    per: 1s
//	    burst: 40              # ...in bursts of up to 40 (Shopify's REST bucket)
//	    max_wait: 10s
//	    concurrency: 4         # at most 4 calls in flight, fleet-wide
//	    lease: 30s
//	    per_tenant: true       # one bucket per store
//	    timeout: 30s
//
//	tenants:
//	  default:                 # tenants not listed below
//	    algorithm: token_bucket
//	    limit: 100
//	    period: 1m
//	  acme:
//	    algorithm: sliding_window_log
//	    limit: 10
//	    period: 1s
//	    weight: 2
//
// # queue
//
// The queue section is required, and so is its bound.
//
//   - name: the asynq queue's name, 1 to 64 characters of A-Z, a-z, 0-9,
//     "_", "." and "-". Default "default".
//   - bound: the most jobs waiting to start: in sluice's waiting room, or
//     in asynq's pending list (handed over and not yet taken by a worker,
//     or asynq's own retries that are due). Enqueue refuses a job beyond
//     it with a "queue full" error; the bound is exact under concurrent
//     producers. Required, 1 to 2^40.
//   - tenant_bound: the most jobs one tenant may have waiting in sluice's
//     waiting room (not yet handed to asynq), so that one tenant's backlog
//     cannot fill the queue. 0 (the default) for no per-tenant bound; at
//     most bound.
//   - prefetch: how many tasks asynq's pending list may hold before a
//     dispatcher hands more jobs over, across the whole fleet. Keep it at
//     least the fleet's total worker concurrency. Default 64, at most
//     1,000,000.
//   - max_payload: the largest job payload. A number of bytes, or a number
//     with a B, KiB or MiB suffix ("512KiB", "1MiB"). Default 1MiB, at
//     most 64MiB.
//   - retention: how long asynq keeps a completed job, with its result,
//     for asynqmon and asynq's Inspector. Redis holds every job completed
//     in this time (about 800 bytes each plus its payload). Default 0s
//     (deleted when it completes, as asynq does by default), at most 720h.
//
// # downstreams
//
// A mapping from a downstream's name to how its calls are paced. A job
// names its downstream; the worker takes a slot of the downstream's
// bucket, shared by every worker on every host through Redis, before the
// job runs. Names are 1 to 64 characters of A-Z, a-z, 0-9, "_", "." and
// "-"; they label metrics.
//
//   - base_url: the built-in HTTP job may only call URLs under it (see
//     below). An absolute http or https URL with a host and no user info,
//     query, fragment or "." and ".." segments. Optional: a downstream
//     without one serves custom handlers only. Two downstreams may not
//     have the same base_url.
//   - rate: how many units (calls, or a call's cost) are allowed per
//     "per". Required, 1 to 2^40.
//   - per: the period of rate, a duration from 1ms to 366 days. Default
//     1s.
//   - burst: how many units may start at once after an idle spell. 1 (the
//     default) spaces calls evenly, per/rate apart: the leaky bucket.
//     More than 1 is a token bucket of that size, refilled at rate per
//     per.
//   - max_wait: the furthest ahead a job may book its slot. A job whose
//     slot would be later goes back to the queue, without spending a
//     retry, and comes back when a slot is near. 0s takes only a slot that
//     is due now. Default 10s, at most 24h.
//   - concurrency: the most calls in flight at once, fleet-wide. 0 (the
//     default) for no cap.
//   - lease: how long a concurrency slot stays taken when its worker dies
//     without giving it back; longer than the longest call. Default 30s,
//     from 1ms to 24h. Used only with concurrency.
//   - per_tenant: false (the default) shares one bucket among all tenants;
//     true gives each tenant its own bucket at this rate, for APIs whose
//     quota is per account (Shopify's is per store).
//   - timeout: the built-in HTTP job's request timeout. Default 30s, from
//     1ms to 24h.
//
// # tenants
//
// A mapping from a tenant's id to how its jobs are admitted at enqueue
// time and drained. The entry "default" applies to every tenant that is
// not listed; a listed tenant's entry replaces it whole (fields are not
// inherited; use a merge key, below, to start from it). With no entry for
// a tenant and no "default", the tenant's jobs are all admitted, weight 1.
//
// A tenant id is any non-empty string of at most 1024 bytes, taken as
// written: quote ids that YAML would otherwise read differently or that
// hold ":", "{", "#" and the like ("shop:1234": ...). Ids that YAML reads
// as numbers are kept as written, so 12345 and "12345" are the same
// tenant.
//
//   - algorithm: fixed_window, sliding_window_log, sliding_window_counter,
//     token_bucket or gcra (see docs/algorithms.md).
//   - limit: units admitted per period (for the buckets: the sustained
//     rate). 1 to 2^40; sliding_window_log at most 100,000.
//   - period: the window, or the time the buckets take to refill limit
//     units. A duration from 1ms to 366 days.
//   - burst: the capacity of token_bucket and gcra; 0 (the default) means
//     limit. Must be 0 for the window algorithms.
//   - weight: the tenant's share of the fair drain: a tenant of weight 3
//     has up to 3 jobs handed over per turn of the round-robin. 1 to 100,
//     default 1.
//
// An entry with none of algorithm, limit, period and burst has no
// admission policy: every job of that tenant is admitted (subject to the
// bounds). Otherwise algorithm, limit and period are required, and the
// policy is checked by algorithms.Policy.Validate, whose message the error
// repeats.
//
// # Values
//
//   - Numbers are whole numbers in decimal digits, optionally with
//     underscores (100_000). "1e5", "0x10", "010" and quoted numbers are
//     errors, and so are values out of range.
//   - Durations are Go duration strings: "500ms", "10s", "1m30s", "2h".
//     A bare number, even 0, is an error: write "0s".
//   - Sizes (max_payload) are bytes, or a number with B, KiB or MiB
//     ("512KiB"). KB and MB are errors: they are ambiguous.
//   - true and false are the only booleans.
//   - Unknown fields are errors ("tenants.acme.limt: unknown field; did
//     you mean "limit"?"), and so is a key given twice in one mapping,
//     such as a tenant listed twice.
//   - Anchors, aliases and merge keys work: "default: &base {...}" and then
//     "acme: {<<: *base, weight: 2}" gives acme default's policy with
//     weight 2. Keys written in the entry win over merged ones.
//   - A file holds one YAML document, of at most 16 MiB.
//
// # Errors
//
// Every problem names its place and field, "file:line:column: field:
// message", one problem per line, in the order of the file (at most
// MaxErrors):
//
//	policy.yaml:14:11: downstreams.shopify.rate: must be at least 1, got 0
//	policy.yaml:21:5: tenants.acme.limt: unknown field; did you mean "limit"?
//	policy.yaml:30:3: tenants.acme: defined twice: first at line 18, again at line 30
//	policy.yaml:33:12: tenants["shop:1234"].burst: fixed_window has no burst; leave it 0 (the window admits Limit)
//
// # URLs that HTTP jobs may call
//
// The built-in HTTP job calls a URL only if a downstream's base_url covers
// it ([Config.DownstreamFor]): the same scheme, host and port (a missing
// port is the scheme's default, so https://a.com and https://a.com:443
// are the same), and a path that is the base_url's path or lies under it
// on a segment boundary. A base_url of https://a.com/api (with or without
// the trailing slash) covers https://a.com/api and https://a.com/api/x,
// but not https://a.com/api2 nor http://a.com/api nor
// https://a.com:8443/api. Paths are compared as sent, percent-encoding
// included. URLs with user info, and URLs whose decoded path has a "."
// or ".." segment (between "/" or "\"), are refused whatever the
// downstreams. When several base URLs cover a URL, the longest path wins,
// so https://a.com/ and https://a.com/admin/ may name different
// downstreams.
package config
