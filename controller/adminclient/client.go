// Package adminclient talks to the controller's admin HTTP API (by default on
// 127.0.0.1:7472): app budgets in, snapshots of apps, containers and hosts
// and a stream of events out. escractl is its user; the JSON shapes are the
// ones documented in docs/operator.md.
package adminclient

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/internal/auth"
)

// DefaultURL is where the controller's admin API listens unless configured:
// HTTPS with client certificates unless the controller runs --insecure.
const DefaultURL = "https://127.0.0.1:7472"

// The admin API's bodies, defined once in controller/adminapi.
type (
	// AppBudget is the body of PUT /v1/apps/{name}: a Distributed
	// Container's global limits and allocator parameters (Escra §IV-A).
	AppBudget = adminapi.AppSpec
	App       = adminapi.App       // an element of GET /v1/apps
	Container = adminapi.Container // an element of GET /v1/containers
	Host      = adminapi.Host      // an element of GET /v1/hosts: a connected daemon
)

// Event is one server-sent event of GET /v1/events: a limit change, an OOM
// verdict, a reclaim, a join or a leave (controller/events.Event).
type Event struct {
	Time        time.Time `json:"time"`
	App         string    `json:"app"`
	Host        string    `json:"host,omitempty"`
	ContainerID string    `json:"container_id,omitempty"`
	Handle      uint32    `json:"handle"`
	Kind        string    `json:"kind"`
	Generation  uint64    `json:"generation,omitempty"`
	CPUQuotaUs  int64     `json:"cpu_quota_us,omitempty"`
	MemoryBytes int64     `json:"memory_limit_bytes,omitempty"`
	Granted     *bool     `json:"granted,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	Raw         string    `json:"-"` // a line that was not an event's JSON
}

// Client calls one controller.
type Client struct {
	base *url.URL
	http *http.Client
}

// New checks the controller URL and returns a plain-HTTP client for it (a
// controller run --insecure); a URL without a scheme is http.
func New(raw string) (*Client, error) { return NewTLS(raw, nil) }

// NewTLS is New for an HTTPS admin API: tc carries the operator's
// certificate (OperatorTLS). A URL without a scheme is https when tc is set.
func NewTLS(raw string, tc *tls.Config) (*Client, error) {
	if !strings.Contains(raw, "://") {
		if tc != nil {
			raw = "https://" + raw
		} else {
			raw = "http://" + raw
		}
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("bad controller URL %q (want e.g. %s)", raw, DefaultURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	hc := &http.Client{}
	if tc != nil {
		hc.Transport = &http.Transport{TLSClientConfig: tc, Proxy: nil, ForceAttemptHTTP2: true}
	}
	return &Client{base: u, http: hc}, nil
}

// OperatorTLS loads an operator's files from dir (escractl certs): the CA
// and ROLE.pem / ROLE-key.pem, role "admin" or "viewer". The controller is
// verified by the name in its certificate (auth.ControllerName), whatever
// address it is reached at.
func OperatorTLS(dir, role string) (*tls.Config, error) {
	return auth.ClientConfig(auth.Files{CA: auth.CAPath(dir), Cert: auth.CertPath(dir, role), Key: auth.KeyPath(dir, role)}, "")
}

// HTTPClient is the client's http.Client, for paths it has no method for
// (a benchmark scraping /metrics).
func (c *Client) HTTPClient() *http.Client { return c.http }

// URL is the controller's base URL as the client uses it.
func (c *Client) URL() string { return c.base.String() }

// UnreachableError says the controller could not be reached at all.
type UnreachableError struct {
	URL string
	Err error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("controller at %s unreachable: %v", e.URL, e.Err)
}
func (e *UnreachableError) Unwrap() error { return e.Err }

// APIError is a non-2xx answer from the controller.
type APIError struct {
	Status int
	Msg    string
}

func (e *APIError) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("controller answered %d %s", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("controller: %s", e.Msg)
}

// ErrNotFound matches an APIError with status 404.
var ErrNotFound = errors.New("not found")

func (e *APIError) Is(target error) bool {
	return target == ErrNotFound && e.Status == http.StatusNotFound
}

func (c *Client) do(ctx context.Context, method, path string, body any, out any) error {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil {
		return fmt.Errorf("controller at %s sent a %s %s answer that is not the expected JSON: %v", c.URL(), method, path, err)
	}
	return nil
}

func (c *Client) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &UnreachableError{URL: c.URL(), Err: rootCause(err)}
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, &APIError{Status: resp.StatusCode, Msg: errorText(resp.Body)}
	}
	return resp, nil
}

// rootCause strips url.Error's "Get \"http://...\":" prefix: the URL is
// already in our message.
func rootCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		if oe.Addr == nil { // a TLS alert from the controller
			if strings.Contains(oe.Err.Error(), "bad certificate") {
				return fmt.Errorf("%s: %w (the controller refused this certificate: expired, of another CA, or on its --tls-deny list)", oe.Op, oe.Err)
			}
			return fmt.Errorf("%s: %w", oe.Op, oe.Err)
		}
		return fmt.Errorf("%s %s: %w", oe.Op, oe.Addr, oe.Err)
	}
	if strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return fmt.Errorf("%w (the controller runs --insecure: use an http:// URL)", err)
	}
	return err
}

// errorText reads an error body: {"error": "..."} or plain text, one line.
func errorText(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 4096))
	var e struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil {
		if e.Error != "" {
			return e.Error
		}
		if e.Message != "" {
			return e.Message
		}
	}
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// PutApp creates or updates an app's budget.
func (c *Client) PutApp(ctx context.Context, b AppBudget) error {
	return c.do(ctx, http.MethodPut, "/v1/apps/"+url.PathEscape(b.Name), b, nil)
}

// CheckApp is PutApp's server-side dry run: the controller validates b
// as it would apply it and answers with the app it would then hold,
// storing and applying nothing.
func (c *Client) CheckApp(ctx context.Context, b AppBudget) (App, error) {
	var out App
	return out, c.do(ctx, http.MethodPut, "/v1/apps/"+url.PathEscape(b.Name)+"?dryRun=1", b, &out)
}

// CheckDelete is DeleteApp's server-side dry run: the number of
// containers a delete would remove (ErrNotFound for an unknown app).
func (c *Client) CheckDelete(ctx context.Context, name string) (int, error) {
	var out struct {
		N int `json:"containers_removed"`
	}
	return out.N, c.do(ctx, http.MethodDelete, "/v1/apps/"+url.PathEscape(name)+"?dryRun=1", nil, &out)
}

// DeleteApp removes an app; it fails with ErrNotFound for an unknown app.
func (c *Client) DeleteApp(ctx context.Context, name string) error {
	err := c.do(ctx, http.MethodDelete, "/v1/apps/"+url.PathEscape(name), nil, nil)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusMethodNotAllowed {
		return fmt.Errorf("the controller at %s cannot delete apps yet (DELETE /v1/apps/{name} answered 405)", c.URL())
	}
	return err
}

// Apps lists the apps.
func (c *Client) Apps(ctx context.Context) ([]App, error) {
	var out []App
	return out, c.list(ctx, "/v1/apps", "apps", &out)
}

// Containers lists the containers, of one app when app is not empty.
func (c *Client) Containers(ctx context.Context, app string) ([]Container, error) {
	var out []Container
	path := "/v1/containers"
	if app != "" {
		path += "?app=" + url.QueryEscape(app)
	}
	if err := c.list(ctx, path, "containers", &out); err != nil {
		return nil, err
	}
	if app == "" {
		return out, nil
	}
	// Filter here too, in case the controller ignores the query.
	kept := out[:0]
	for _, ct := range out {
		if ct.App == app {
			kept = append(kept, ct)
		}
	}
	return kept, nil
}

// Hosts lists the hosts whose daemons are or were connected.
func (c *Client) Hosts(ctx context.Context) ([]Host, error) {
	var out []Host
	return out, c.list(ctx, "/v1/hosts", "hosts", &out)
}

// RawList returns the JSON the controller sent for a list, for -o json.
func (c *Client) RawList(ctx context.Context, path string) (json.RawMessage, error) {
	var raw json.RawMessage
	return raw, c.do(ctx, http.MethodGet, path, nil, &raw)
}

// list accepts either a bare JSON array or an object holding it under key.
func (c *Client) list(ctx context.Context, path, key string, out any) error {
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodGet, path, nil, &raw); err != nil {
		return err
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return fmt.Errorf("controller at %s: bad JSON from %s: %v", c.URL(), path, err)
		}
		raw = obj[key]
		if raw == nil {
			raw = json.RawMessage("[]")
		}
	}
	if string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("controller at %s: bad JSON from %s: %v", c.URL(), path, err)
	}
	return nil
}

// Events streams events (of one app when app is not empty) to fn until ctx
// ends or the controller closes the stream. It reads newline-delimited JSON
// and also server-sent events ("data: {...}" lines). A line that is not an
// event's JSON is passed on in the event's Raw, so nothing is lost.
func (c *Client) Events(ctx context.Context, app string, fn func(Event, []byte)) error {
	return c.EventsSince(ctx, app, "", true, fn)
}

// EventsSince is Events that first replays the controller's kept events
// later than since (a duration back from now, "5m", or an RFC 3339 time;
// "" for none), and ends after them unless follow.
func (c *Client) EventsSince(ctx context.Context, app, since string, follow bool, fn func(Event, []byte)) error {
	q := url.Values{}
	if app != "" {
		q.Set("app", app)
	}
	if since != "" {
		q.Set("since", since)
	}
	if !follow {
		q.Set("follow", "false")
	}
	path := "/v1/events"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	resp, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == ':' || bytes.HasPrefix(line, []byte("event:")) || bytes.HasPrefix(line, []byte("id:")) {
			continue
		}
		line = bytes.TrimSpace(bytes.TrimPrefix(line, []byte("data:")))
		var ev Event
		if json.Unmarshal(line, &ev) != nil {
			ev = Event{Raw: string(line)}
		}
		fn(ev, append([]byte(nil), line...))
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("event stream from %s broke: %v", c.URL(), err)
	}
	return nil
}

// DeployContainer is one container for Deploy (replicas expanded), with
// its bootstrap limits; Placed is one container the controller created.
type (
	DeployContainer = adminapi.DeployContainer
	Placed          = adminapi.Placed
)

// Deploy asks the controller to place and create an app's containers on
// its hosts. All or nothing: on error the controller has removed what it
// created.
func (c *Client) Deploy(ctx context.Context, app string, cs []DeployContainer) ([]Placed, error) {
	var out adminapi.DeployResponse
	err := c.do(ctx, http.MethodPost, "/v1/apps/"+url.PathEscape(app)+"/deploy", adminapi.DeployRequest{Containers: cs}, &out)
	return out.Containers, err
}

// DeployOrRollout is Deploy for an app that may already run containers:
// the controller then rolls it out to cs one replica at a time, and the
// answer says what changed.
func (c *Client) DeployOrRollout(ctx context.Context, app string, cs []DeployContainer) (adminapi.DeployResponse, error) {
	var out adminapi.DeployResponse
	err := c.do(ctx, http.MethodPost, "/v1/apps/"+url.PathEscape(app)+"/deploy", adminapi.DeployRequest{Containers: cs}, &out)
	return out, err
}

// Version asks the controller for its version.
func (c *Client) Version(ctx context.Context) (adminapi.Version, error) {
	var v adminapi.Version
	err := c.do(ctx, http.MethodGet, "/v1/version", nil, &v)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return v, fmt.Errorf("the controller at %s is older than GET /v1/version", c.URL())
	}
	return v, err
}
