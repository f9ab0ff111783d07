// Package deploytest holds no code: its tests check the files of deploy/
// against the code (every metric the Grafana dashboard and the alert rules
// name is one the worker exports; the compose set-up's policy file loads).
package deploytest
