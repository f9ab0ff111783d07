package worker

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/queue"
)

// handleJobs registers the inspector's JSON endpoints on mux, behind the
// same Host and Origin guard as the others, and behind op (the operator
// token, when one is set: they show and delete any tenant's jobs):
//
//	GET    /jobs/{id}?tenant=T            where the job is and why it waits (queue.JobInfo)
//	GET    /jobs?id=ID&tenant=T           the same, for the page's form
//	DELETE /jobs/{id}?tenant=T[&later=1]  delete a waiting job (later=1: cancel a job for later only)
//	GET    /tenants/{tenant}/jobs?cursor=C&limit=N[&delayed=1]  a page of its jobs (queue.Page)
//
// Errors are {"error": "..."} with 400 (a bad tenant or cursor), 404 (no
// such job), 409 (the job is asynq's now: its "queue" and "task_id" are
// given, for asynq's tools; or, with later=1, a job that is due already)
// or 500.
func handleJobs(mux *http.ServeMux, in *queue.Inspector, op func(http.Handler) http.Handler) {
	handle := func(pattern string, f http.HandlerFunc) { mux.Handle(pattern, op(f)) }
	handle("GET /jobs/{id}", func(rw http.ResponseWriter, r *http.Request) {
		info, err := in.Job(r.Context(), r.URL.Query().Get("tenant"), r.PathValue("id"))
		reply(rw, info, err)
	})
	handle("GET /jobs", func(rw http.ResponseWriter, r *http.Request) {
		info, err := in.Job(r.Context(), r.URL.Query().Get("tenant"), r.URL.Query().Get("id"))
		reply(rw, info, err)
	})
	handle("DELETE /jobs/{id}", func(rw http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		f := in.Delete
		if q.Get("later") == "1" {
			f = in.Cancel
		}
		err := f(r.Context(), q.Get("tenant"), r.PathValue("id"))
		reply(rw, map[string]string{"deleted": r.PathValue("id")}, err)
	})
	handle("GET /tenants/{tenant}/jobs", func(rw http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		limit, _ := strconv.Atoi(q.Get("limit"))
		pg, err := in.List(r.Context(), r.PathValue("tenant"), queue.ListOptions{Delayed: q.Get("delayed") == "1", Cursor: q.Get("cursor"), Limit: limit})
		reply(rw, pg, err)
	})
}

// reply writes v as JSON, or err with its status.
func reply(rw http.ResponseWriter, v any, err error) {
	rw.Header().Set("Content-Type", "application/json")
	if err != nil {
		body := map[string]string{"error": err.Error()}
		status := http.StatusInternalServerError
		var ho *queue.HandedOverError
		switch {
		case errors.As(err, &ho):
			status, body["queue"], body["task_id"] = http.StatusConflict, ho.Queue, ho.TaskID
		case errors.Is(err, queue.ErrNotDelayed):
			status = http.StatusConflict
		case errors.Is(err, queue.ErrJobNotFound):
			status = http.StatusNotFound
		case errors.Is(err, queue.ErrInvalidJob):
			status = http.StatusBadRequest
		}
		rw.WriteHeader(status)
		v = body
	}
	json.NewEncoder(rw).Encode(v)
}
