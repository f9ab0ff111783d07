// Package policy reads sluice's policy file: the YAML file, loaded by
// cmd/worker, cmd/enqueue and any Go program that runs its own queue.Server
// or queue.Producer, that gives the queue's bounds, the downstream APIs
// that jobs call and how fast, and how each tenant is admitted. [Load] and
// [Parse] return a [Config] or an [ErrorList]; docs/policy.md describes the
// file's fields, defaults, limits and errors, and this package's use.
package policy
