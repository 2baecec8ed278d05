package viewer

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/norntype"
	"github.com/nornlabs/norn/persistence"
)

// Options configures the viewer. The zero value is a read-only viewer with
// no authentication, mounted at the root path.
type Options struct {
	// AllowActions shows the action forms (cancel, send, terminate, retry,
	// restart, reset, start) and accepts their POSTs.
	// False (the default) makes the viewer read-only: every POST is refused
	// with 403 Forbidden, so a viewer exposed by mistake changes nothing.
	AllowActions bool
	// Token, if set, is required on every request: either as an
	// "Authorization: Bearer <token>" header (for scripts and proxies) or as
	// the cookie the viewer sets when a page is opened once with
	// "?token=<token>" (for browsers; the token is then removed from the
	// address). Requests without it get 401 Unauthorized. Serve the viewer
	// over TLS when the token crosses a network.
	Token string
	// BasePath is the path prefix the handler is mounted under, e.g.
	// "/norn" for mux.Handle("/norn/", h). The handler expects the full
	// request path (do not strip the prefix) and prefixes every link it
	// writes with it. Empty means the root.
	BasePath string
	// Logger receives action and error logs; default slog.Default().
	Logger *slog.Logger
	// ActionTokenTTL is how long the cancel and send forms of a page stay
	// valid: a form token older than this is refused (reload the page), so
	// that a token that leaked (a proxy log, a saved page) cannot be
	// replayed later. Default DefaultActionTokenTTL.
	ActionTokenTTL time.Duration
	// Workflows are the workflows the list page's start form offers (with
	// AllowActions): the definitions of the program that mounts the viewer
	// (cli.Main passes its own). Empty: no start form. The query form also
	// replays with them the instances of workflows sys lacks.
	Workflows []actor.Definition
}

// DefaultActionTokenTTL is Options.ActionTokenTTL's default.
const DefaultActionTokenTTL = 15 * time.Minute

// cookieName holds the token in browsers.
const cookieName = "norn_viewer_token"

// sessionCookie names the browser's viewer session, to which the action
// forms' tokens are bound: a form token works only with the cookie of the
// browser it was rendered for.
const sessionCookie = "norn_viewer_session"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// handler serves the viewer's pages.
type handler struct {
	sys   *actor.System
	opts  Options
	base  string
	log   *slog.Logger
	pages map[string]*template.Template
	mux   *http.ServeMux
	// csrfKey signs the hidden form tokens of the actions.
	csrfKey []byte
	cop     *http.CrossOriginProtection
	now     func() time.Time
	// countCache holds the header's instance counts (see header.go).
	countCache countsCache
}

// New returns an http.Handler serving the web viewer for the instances in
// sys's store: a list of instances with filters (workflow, status, input
// fields), search by ID and pagination, and a page per instance with its
// status, input and output, a timeline chart of what ran when, its
// history event by event, its mailbox, subscriptions and pending
// timers. With Options.AllowActions it also offers cancel and send.
//
// sys may be a client System (one that runs no instances): the viewer only
// reads, and its actions (Cancel, Send) commit to the store and wake the
// instance's owner like any call from outside a workflow. Pages, styles and
// scripts are embedded in the binary; nothing is fetched from elsewhere.
//
// Mount it under Options.BasePath:
//
//	h, err := viewer.New(sys, viewer.Options{BasePath: "/norn", Token: os.Getenv("NORN_VIEWER_TOKEN")})
//	if err != nil { ... }
//	mux.Handle("/norn/", h)
//
// The actions are POST forms protected against cross-site requests twice:
// each form carries a signed token, valid for that action on that instance
// only, for Options.ActionTokenTTL, and only with the browser session (a
// cookie) it was rendered for, or with the bearer token for scripts; and
// requests that the browser marks as cross-origin are refused
// (http.CrossOriginProtection). With a Token the signing key is derived
// from it, so forms stay valid across restarts and between viewers sharing
// the token; without one the key is random for each New.
func New(sys *actor.System, opts Options) (http.Handler, error) {
	if sys == nil {
		return nil, errors.New("viewer: nil System")
	}
	base, err := cleanBase(opts.BasePath)
	if err != nil {
		return nil, err
	}
	switch {
	case opts.ActionTokenTTL < 0:
		return nil, fmt.Errorf("viewer: ActionTokenTTL %v is negative", opts.ActionTokenTTL)
	case opts.ActionTokenTTL == 0:
		opts.ActionTokenTTL = DefaultActionTokenTTL
	}
	h := &handler{sys: sys, opts: opts, base: base, log: opts.Logger, mux: http.NewServeMux(),
		cop: http.NewCrossOriginProtection(), now: time.Now}
	if h.log == nil {
		h.log = slog.Default()
	}
	if opts.Token != "" {
		m := hmac.New(sha256.New, []byte(opts.Token))
		m.Write([]byte("norn viewer form tokens"))
		h.csrfKey = m.Sum(nil)
	} else {
		h.csrfKey = make([]byte, 32)
		if _, err := rand.Read(h.csrfKey); err != nil {
			return nil, fmt.Errorf("viewer: form token key: %w", err)
		}
	}
	if err := h.parseTemplates(); err != nil {
		return nil, err
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, fmt.Errorf("viewer: static assets: %w", err)
	}
	h.mux.Handle("GET "+base+"/static/", http.StripPrefix(base+"/static/", cacheStatic(http.FileServerFS(static))))
	h.mux.HandleFunc("GET "+base+"/{$}", h.list)
	h.mux.HandleFunc("GET "+base+"/instances/{id...}", h.instance)
	h.mux.HandleFunc("GET "+base+"/channels", h.channels)
	h.mux.HandleFunc("GET "+base+"/counts", h.counts)
	h.mux.HandleFunc("POST "+base+"/cancel", h.cancel)
	h.mux.HandleFunc("POST "+base+"/send", h.send)
	h.mux.HandleFunc("POST "+base+"/start", h.start)
	for _, a := range []string{"terminate", "retry", "restart", "reset"} {
		h.mux.HandleFunc("POST "+base+"/"+a, h.rerun(a))
	}
	if base != "" {
		h.mux.Handle("GET "+base, http.RedirectHandler(base+"/", http.StatusFound))
	}
	h.mux.HandleFunc("/", h.notFound)
	return h, nil
}

func cleanBase(p string) (string, error) {
	p = strings.TrimRight(p, "/")
	if p == "" {
		return "", nil
	}
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "{}?# ") {
		return "", fmt.Errorf("viewer: BasePath %q must be a path starting with /", p)
	}
	return p, nil
}

func cacheStatic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		next.ServeHTTP(w, r)
	})
}

// ServeHTTP checks the token, then routes.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Content-Security-Policy",
		"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; form-action 'self'; frame-ancestors 'none'")
	// The stylesheet and script are public: the 401 page uses them.
	public := strings.HasPrefix(r.URL.Path, h.base+"/static/")
	if h.opts.Token != "" && !public && !h.authorized(w, r) {
		return
	}
	if h.opts.AllowActions && !public {
		r = r.WithContext(context.WithValue(r.Context(), sessionKey{}, h.session(w, r)))
	}
	h.mux.ServeHTTP(w, r)
}

// sessionKey holds a request's session (see session) in its context.
type sessionKey struct{}

// bearerSession is the session of requests authorized by the bearer header:
// scripts, which a cross-site form cannot imitate (a browser never adds
// the header on its own).
const bearerSession = "bearer"

// session is what a request's form tokens are bound to: the bearer session
// for a request with a valid Authorization header, else the browser's
// session cookie, which a GET without one gets (a POST without one has no
// session, and no form token matches it).
func (h *handler) session(w http.ResponseWriter, r *http.Request) string {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && h.opts.Token != "" && h.tokenOK(tok) {
		return bearerSession
	}
	if c, err := r.Cookie(sessionCookie); err == nil && len(c.Value) == 32 {
		if _, err := hex.DecodeString(c.Value); err == nil {
			return c.Value
		}
	}
	if r.Method != http.MethodGet {
		return ""
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return ""
	}
	sess := hex.EncodeToString(b[:])
	// Strict: the session only ever needs to reach the viewer's own forms.
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: sess, Path: h.base + "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return sess
}

// template is the page template to execute for r: with actions, a copy
// whose csrf function mints tokens for r's session (the masters are only
// ever cloned, which html/template requires of a template to clone).
func (h *handler) template(r *http.Request, name string) (*template.Template, error) {
	t := h.pages[name]
	if !h.opts.AllowActions {
		return t, nil
	}
	sess, _ := r.Context().Value(sessionKey{}).(string)
	c, err := t.Clone()
	if err != nil {
		return nil, err
	}
	return c.Funcs(template.FuncMap{"csrf": func(action, id string) string { return h.csrfToken(sess, action, id) }}), nil
}

// authorized accepts the bearer header or the cookie; a valid ?token= sets
// the cookie and redirects to the same address without it.
func (h *handler) authorized(w http.ResponseWriter, r *http.Request) bool {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && h.tokenOK(tok) {
		return true
	}
	if c, err := r.Cookie(cookieName); err == nil && h.tokenOK(c.Value) {
		return true
	}
	q := r.URL.Query()
	if tok := q.Get("token"); r.Method == http.MethodGet && tok != "" && h.tokenOK(tok) {
		// Lax, not Strict: a link to the viewer from a chat or a ticket
		// must open it. Forms are guarded by their own tokens.
		http.SetCookie(w, &http.Cookie{Name: cookieName, Value: tok, Path: h.base + "/", HttpOnly: true,
			SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
		q.Del("token")
		u := *r.URL
		u.RawQuery = q.Encode()
		http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
		return false
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="norn viewer"`)
	h.errorPage(w, r, http.StatusUnauthorized, "A token is required",
		"Open the viewer once with ?token=… in the address, or send an Authorization: Bearer header.")
	return false
}

func (h *handler) tokenOK(tok string) bool {
	return subtle.ConstantTimeCompare([]byte(tok), []byte(h.opts.Token)) == 1
}

// csrfToken signs an action on one instance for one session, until
// ActionTokenTTL from now: the expiry (Unix nanoseconds, 16 hex digits)
// followed by the signature.
func (h *handler) csrfToken(session, action, id string) string {
	var exp [8]byte
	binary.BigEndian.PutUint64(exp[:], uint64(h.now().Add(h.opts.ActionTokenTTL).UnixNano()))
	return hex.EncodeToString(exp[:]) + hex.EncodeToString(h.csrfMAC(exp[:], session, action, id))
}

func (h *handler) csrfMAC(exp []byte, session, action, id string) []byte {
	m := hmac.New(sha256.New, h.csrfKey)
	m.Write(exp)
	m.Write([]byte(session + "\x00" + action + "\x00" + id))
	return m.Sum(nil)
}

// csrfCheck reports whether tok is valid now for the action on id in the
// session, and whether a token that is genuine has merely expired.
func (h *handler) csrfCheck(tok, session, action, id string) (ok, expired bool) {
	raw, err := hex.DecodeString(tok)
	if err != nil || len(raw) != 8+sha256.Size || session == "" {
		return false, false
	}
	if !hmac.Equal(raw[8:], h.csrfMAC(raw[:8], session, action, id)) {
		return false, false
	}
	if h.now().UnixNano() >= int64(binary.BigEndian.Uint64(raw[:8])) {
		return false, true
	}
	return true, false
}

// checkAction refuses POSTs in read-only mode, from other origins, or
// without a valid form token; it reports whether the action may go on.
func (h *handler) checkAction(w http.ResponseWriter, r *http.Request, action string) (string, bool) {
	if !h.opts.AllowActions {
		h.errorPage(w, r, http.StatusForbidden, "Read-only viewer",
			"This viewer was started read-only; actions are disabled.")
		return "", false
	}
	if err := h.cop.Check(r); err != nil {
		h.errorPage(w, r, http.StatusForbidden, "Cross-origin request refused", err.Error())
		return "", false
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<20)
	if err := r.ParseForm(); err != nil {
		h.errorPage(w, r, http.StatusBadRequest, "Bad form", err.Error())
		return "", false
	}
	id := r.PostForm.Get("id")
	if err := persistence.ValidateID("id", id); err != nil || id == "" {
		h.errorPage(w, r, http.StatusBadRequest, "Bad instance ID", "The form names no instance, or an ID no instance can have (control characters, invalid UTF-8, too long).")
		return "", false
	}
	sess, _ := r.Context().Value(sessionKey{}).(string)
	switch ok, expired := h.csrfCheck(r.PostForm.Get("csrf"), sess, action, id); {
	case expired:
		h.errorPage(w, r, http.StatusForbidden, "Form expired",
			"The form is older than "+h.opts.ActionTokenTTL.String()+". Reload the page and try again.")
		return "", false
	case !ok:
		h.errorPage(w, r, http.StatusForbidden, "Form expired",
			"The form's token is not valid for this browser session (the viewer may have restarted, or the form came from elsewhere). Reload the page and try again.")
		return "", false
	}
	return id, true
}

// instanceURL is the page of an instance. IDs are free text: one that a
// path would not keep as it is (empty segments, "." or "..", which
// http.ServeMux cleans away) goes in the query instead.
func (h *handler) instanceURL(id string) string {
	parts := strings.Split(id, "/")
	for i, p := range parts {
		if p == "" || p == "." || p == ".." {
			return h.base + "/instances/?id=" + url.QueryEscape(id)
		}
		parts[i] = url.PathEscape(p)
	}
	// The slashes of child IDs stay readable.
	return h.base + "/instances/" + strings.Join(parts, "/")
}

// notices are what an action reports on the page it returns to. The
// address carries a key, not the text, so that a link cannot make the
// viewer display words of someone else's choosing.
var notices = map[string]string{
	"cancelled": "Cancel requested.",
	"ended":     "Not cancelled: the instance has already ended.",
	"sent":      "Message sent.",
}

// notice is the text of the notice named done ("" for none or unknown).
func notice(done string) string {
	if n, ok := notices[done]; ok {
		return n
	}
	return rerunNotices[done]
}

// redirectNotice sends the browser back to the instance page (POST, then
// redirect, then GET: a reload does not repeat the action).
func (h *handler) redirectNotice(w http.ResponseWriter, r *http.Request, id, notice string) {
	http.Redirect(w, r, h.instanceURL(id)+"?done="+notice, http.StatusSeeOther)
}

func (h *handler) cancel(w http.ResponseWriter, r *http.Request) {
	id, ok := h.checkAction(w, r, "cancel")
	if !ok {
		return
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if reason == "" {
		reason = "cancelled from the viewer"
	}
	err := h.sys.Cancel(r.Context(), norntype.PID(id), reason)
	switch {
	case errors.Is(err, actor.ErrNotFound):
		h.notFoundInstance(w, r, id)
		return
	case errors.Is(err, actor.ErrInvalidInput):
		h.errorPage(w, r, http.StatusBadRequest, "Cancel refused", err.Error())
		return
	case errors.Is(err, actor.ErrInstanceDone):
		h.redirectNotice(w, r, id, "ended")
		return
	case err != nil:
		h.serverError(w, r, fmt.Errorf("cancel %s: %w", id, err))
		return
	}
	h.log.InfoContext(r.Context(), "viewer: cancel requested", "instance", id, "reason", reason)
	h.redirectNotice(w, r, id, "cancelled")
}

// sentMessage is a message typed in the send form: its JSON as given,
// stored under the type name given (empty: any receive takes it).
type sentMessage struct {
	typ  string
	data []byte
}

func (m sentMessage) MessageType() string          { return m.typ }
func (m sentMessage) MarshalJSON() ([]byte, error) { return m.data, nil }

func (h *handler) send(w http.ResponseWriter, r *http.Request) {
	id, ok := h.checkAction(w, r, "send")
	if !ok {
		return
	}
	payload := strings.TrimSpace(r.PostForm.Get("payload"))
	if payload == "" {
		payload = "null"
	}
	if !jsonValid(payload) {
		h.errorPage(w, r, http.StatusBadRequest, "Not JSON", "The message must be a JSON value.")
		return
	}
	msg := sentMessage{typ: strings.TrimSpace(r.PostForm.Get("type")), data: []byte(payload)}
	var err error
	if ch := strings.TrimSpace(r.PostForm.Get("channel")); ch != "" {
		err = h.sys.SendOn(r.Context(), ch, norntype.PID(id), msg)
	} else {
		err = h.sys.Send(r.Context(), norntype.PID(id), msg)
	}
	switch {
	case errors.Is(err, actor.ErrNotFound):
		h.notFoundInstance(w, r, id)
		return
	case errors.Is(err, actor.ErrInvalidInput):
		h.errorPage(w, r, http.StatusBadRequest, "Message refused", err.Error())
		return
	case errors.Is(err, actor.ErrChannelModeConflict):
		h.errorPage(w, r, http.StatusConflict, "Message refused", err.Error())
		return
	case err != nil:
		h.serverError(w, r, fmt.Errorf("send to %s: %w", id, err))
		return
	}
	h.log.InfoContext(r.Context(), "viewer: message sent", "instance", id, "type", msg.typ)
	h.redirectNotice(w, r, id, "sent")
}

func (h *handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.errorPage(w, r, http.StatusNotFound, "Not found", "There is no page at "+r.URL.Path+".")
}

func (h *handler) notFoundInstance(w http.ResponseWriter, r *http.Request, id string) {
	h.errorPage(w, r, http.StatusNotFound, "Instance not found", "No instance has the ID "+id+".")
}

func (h *handler) serverError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the browser went away
	}
	h.log.ErrorContext(r.Context(), "viewer: request failed", "path", r.URL.Path, "err", err)
	h.errorPage(w, r, http.StatusInternalServerError, "Something went wrong", err.Error())
}

type errorData struct {
	pageData
	Status  int
	Title   string
	Message string
}

func (h *handler) errorPage(w http.ResponseWriter, r *http.Request, status int, title, msg string) {
	h.render(w, r, status, "error", &errorData{pageData: h.page(title), Status: status, Title: title, Message: msg})
}
