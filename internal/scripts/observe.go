package scripts

// ThrottleObserve moves a key's buckets to what the API reports left, for
// package throttle (throttle_observe.lua).
var ThrottleObserve = script("throttle_observe")
