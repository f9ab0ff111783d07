// Package policy reads sluice's policy file: the YAML file that
// cmd/worker and cmd/enqueue load to learn the queue's bounds, the
// third-party APIs that jobs call and how fast the whole fleet may call
// them, and how each tenant is admitted at enqueue time. A Go program that
// runs its own queue.Server or queue.Producer loads the same file with it.
//
// [Load] reads and parses a file, [Parse] a file's contents; both return
// a [Config] with every default filled in, or an [ErrorList] that names the
// line, column and field of each problem. [Config.TenantPolicy] finds a
// tenant's entry, [Config.DownstreamFor] the downstream that a URL belongs
// to, and [Config.QueueConfig] the queue.Config for queue.NewProducer and
// queue.NewServer.
//
// The file's fields, defaults, limits and errors are described in
// docs/policy.md.
package policy
