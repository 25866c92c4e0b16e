// Package admin serves a rules.Limiter over HTTP: an API that lists,
// reads, creates, replaces and deletes rules and sets the load factor,
// with optimistic concurrency (ETag, If-Match) and an authorization hook,
// and a rate-check endpoint for gateways and programs in other languages.
// Both are http.Handlers, to mount in a service of your own; hybridlimitd
// serves them. docs/policies.md has curl examples.
package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/hybridlimit/hybridlimit/rules"
)

// maxBody bounds a request's body: one rule, or a check.
const maxBody = 64 << 10

// Config configures the rules API.
type Config struct {
	// Rules is what the API reads and changes. Required.
	Rules *rules.Limiter

	// Authorize is asked, for every request, whether it may be served;
	// an error refuses it (403, the error's text in the body). Required:
	// with none, New fails, so that no deployment serves the API open by
	// mistake. Check a bearer token, a client certificate
	// (r.TLS.PeerCertificates), or a network.
	Authorize func(r *http.Request) error

	// OnChange, if set, is called with each rules document the API
	// applied, after it is in force: to write it back to the file the
	// rules came from. An error is the caller's to log: the change
	// stands.
	OnChange func(doc []byte)

	// Store, if set, is the rules document the fleet shares (nodes
	// follow it: rules.Limiter.Follow). A change is then made to the
	// store's latest version and saved there (rules.Limiter.Publish),
	// and the ETag is that version: a change that another node's beat
	// to the store is a 409, to be made again.
	Store rules.Store
}

// New returns the rules API for cfg. It serves:
//
//	GET    /admin/v1/rules               the rules document, as JSON
//	GET    /admin/v1/rules/{name}        one rule
//	PUT    /admin/v1/rules/{name}        create or replace a rule (JSON body)
//	DELETE /admin/v1/rules/{name}        delete a rule
//	PUT    /admin/v1/load_factor         {"load_factor": 0.5}: every rule's
//
// Every answer carries the document's ETag; a change with If-Match is
// refused (412) unless it matches, so that two operators do not
// overwrite each other. A change is checked as a rules file is (an error
// is a 400 naming the field) and applied at once (rules.Limiter.Apply).
func New(cfg Config) (http.Handler, error) {
	if cfg.Rules == nil {
		return nil, errors.New("admin: Config.Rules is nil")
	}
	if cfg.Authorize == nil {
		return nil, errors.New("admin: Config.Authorize is nil; give a check of who may change the rules")
	}
	a := &api{cfg: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/v1/rules", a.list)
	mux.HandleFunc("GET /admin/v1/rules/{name}", a.get)
	mux.HandleFunc("PUT /admin/v1/rules/{name}", a.put)
	mux.HandleFunc("DELETE /admin/v1/rules/{name}", a.delete)
	mux.HandleFunc("PUT /admin/v1/load_factor", a.loadFactor)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := cfg.Authorize(r); err != nil {
			problem(w, http.StatusForbidden, "not authorized: "+err.Error())
			return
		}
		mux.ServeHTTP(w, r)
	}), nil
}

// api serves the rules API; mu makes each change a read, modify and
// write of the document that no other change interleaves.
type api struct {
	cfg Config
	mu  sync.Mutex
}

// document is the rules document in force, decoded, its ETag, and its
// version in the Store (0 without one).
func (a *api) document(r *http.Request, latest bool) (map[string]any, string, uint64, error) {
	src := a.cfg.Rules.Rules().Source()
	v := a.cfg.Rules.Version()
	if a.cfg.Store != nil && latest {
		doc, sv, err := a.cfg.Store.Load(r.Context(), 0)
		if err != nil {
			return nil, "", 0, err
		}
		if sv > 0 {
			src, v = doc, sv
		}
	}
	doc := map[string]any{}
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, "", 0, err
	}
	if a.cfg.Store != nil {
		return doc, fmt.Sprintf(`"v%d"`, v), v, nil
	}
	sum := sha256.Sum256(src)
	return doc, `"` + hex.EncodeToString(sum[:8]) + `"`, v, nil
}

// rulesOf is doc's rules.
func rulesOf(doc map[string]any) []any {
	rs, _ := doc["rules"].([]any)
	return rs
}

// find is the index of the rule named name in rs, or -1.
func find(rs []any, name string) int {
	return slices.IndexFunc(rs, func(r any) bool {
		m, ok := r.(map[string]any)
		return ok && m["name"] == name
	})
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	doc, tag, _, err := a.document(r, false)
	if err != nil {
		problem(w, http.StatusInternalServerError, err.Error())
		return
	}
	reply(w, http.StatusOK, tag, doc)
}

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	doc, tag, _, err := a.document(r, false)
	if err != nil {
		problem(w, http.StatusInternalServerError, err.Error())
		return
	}
	rs := rulesOf(doc)
	i := find(rs, r.PathValue("name"))
	if i < 0 {
		problem(w, http.StatusNotFound, fmt.Sprintf("no rule is named %q", r.PathValue("name")))
		return
	}
	reply(w, http.StatusOK, tag, rs[i])
}

func (a *api) put(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var rule map[string]any
	if !decode(w, r, &rule) {
		return
	}
	if n, ok := rule["name"]; ok && n != name {
		problem(w, http.StatusBadRequest, fmt.Sprintf("the body names the rule %v, the path %q", n, name))
		return
	}
	rule["name"] = name
	a.change(w, r, func(doc map[string]any) int {
		rs := rulesOf(doc)
		if i := find(rs, name); i >= 0 {
			rs[i] = rule
			doc["rules"] = rs
			return http.StatusOK
		}
		doc["rules"] = append(rs, rule)
		return http.StatusCreated
	})
}

func (a *api) delete(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	a.change(w, r, func(doc map[string]any) int {
		rs := rulesOf(doc)
		i := find(rs, name)
		if i < 0 {
			return http.StatusNotFound
		}
		doc["rules"] = slices.Delete(rs, i, i+1)
		return http.StatusOK
	})
}

func (a *api) loadFactor(w http.ResponseWriter, r *http.Request) {
	var body struct {
		LoadFactor *float64 `json:"load_factor"`
	}
	if !decode(w, r, &body) {
		return
	}
	if body.LoadFactor == nil {
		problem(w, http.StatusBadRequest, `the body must set "load_factor"`)
		return
	}
	a.change(w, r, func(doc map[string]any) int {
		doc["load_factor"] = *body.LoadFactor
		return http.StatusOK
	})
}

// change applies edit to the document in force, checks and applies the
// result, and answers with the new document's ETag; edit returns the
// status to answer with, or 404 for nothing to change.
func (a *api) change(w http.ResponseWriter, r *http.Request, edit func(doc map[string]any) int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	doc, tag, version, err := a.document(r, true)
	if err != nil {
		problem(w, http.StatusServiceUnavailable, "cannot read the rules: "+err.Error())
		return
	}
	if m := r.Header.Get("If-Match"); m != "" && m != tag && m != "*" {
		problem(w, http.StatusPreconditionFailed, fmt.Sprintf("the rules changed: If-Match %s, the document is %s; read it again", m, tag))
		return
	}
	status := edit(doc)
	doc = plain(doc).(map[string]any)
	if status == http.StatusNotFound {
		problem(w, http.StatusNotFound, fmt.Sprintf("no rule is named %q", r.PathValue("name")))
		return
	}
	src, err := yaml.Marshal(doc)
	if err != nil {
		problem(w, http.StatusBadRequest, err.Error())
		return
	}
	if a.cfg.Store != nil {
		if _, err := a.cfg.Rules.Publish(r.Context(), a.cfg.Store, src, version); err != nil {
			code := http.StatusBadRequest
			if errors.Is(err, rules.ErrConflict) {
				code = http.StatusConflict // another node's change came first
			}
			problem(w, code, err.Error())
			return
		}
	} else {
		set, err := rules.Parse("admin", src)
		if err == nil {
			err = a.cfg.Rules.Apply(set)
		}
		if err != nil {
			problem(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	if a.cfg.OnChange != nil {
		a.cfg.OnChange(a.cfg.Rules.Rules().Source())
	}
	doc, tag, _, err = a.document(r, false)
	if err != nil {
		problem(w, http.StatusInternalServerError, err.Error())
		return
	}
	reply(w, status, tag, doc)
}

// decode reads r's JSON body into v, at most maxBody bytes, answering a
// 400 and reporting false if it cannot.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	d := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		problem(w, http.StatusBadRequest, "the body is not JSON of the expected shape: "+err.Error())
		return false
	}
	if _, err := d.Token(); err != io.EOF {
		problem(w, http.StatusBadRequest, "the body holds more than one JSON value")
		return false
	}
	return true
}

// reply writes v as JSON with status and the document's ETag; JSON that
// cannot be made is a 500, never a status with an empty body.
func reply(w http.ResponseWriter, status int, tag string, v any) {
	body, err := json.Marshal(plain(v))
	if err != nil {
		problem(w, http.StatusInternalServerError, "cannot write the rules as JSON: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("ETag", tag)
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// plain is v, decoded from YAML or JSON, with what JSON and YAML write
// alike: mappings keyed by strings (YAML reads "1:" as a number) and
// JSON's numbers as numbers (a body's "limit": 5 is 5 in the document,
// not "5").
func plain(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = plain(x)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[fmt.Sprint(k)] = plain(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = plain(x)
		}
		return out
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		if f, err := v.Float64(); err == nil {
			return f
		}
		return v.String()
	}
	return v
}

// problem writes an RFC 9457 problem with status and detail.
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "title": http.StatusText(status), "detail": detail})
}
