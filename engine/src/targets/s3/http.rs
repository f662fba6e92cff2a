//! The S3 target's I/O: HTTP/1.1 through hyper on current-thread tokio
//! runtimes, each on a thread of its own (`io_threads`), with no work
//! stealing. Every slot has its own keep-alive connection, opened before the
//! measured phase, and a task on one of the threads that runs the slot's
//! ops one at a time: sign, send, read the response to its end, store the
//! outcome, then `Done::complete()` (on the I/O thread, so the engine's fast
//! path may reissue the slot there without waking anyone).
//!
//! No hidden retries: a request that fails is the op's error, unless the
//! spec's retry policy names its kind; then it is sent again (after a
//! backoff), every retry counted by kind, and the op's latency covers all
//! its attempts. A connection that the server closed while idle is reopened
//! before the next request is sent on it (counted in `reconnects`).
//!
//! Multipart: a PUT with `multipart` set is CreateMultipartUpload, the parts
//! (`parts_in_flight` at a time, each on a connection of the slot's own:
//! the first is the slot's, the others are opened the first time they are
//! needed and kept), then CompleteMultipartUpload; a failure aborts the
//! upload, so no parts stay behind.

use super::Retry;
use super::sigv4::{self, Signer};
use crate::clock::mono_ns;
use crate::errno::ErrKind;
use crate::io::Done;
use bytes::Bytes;
use http::{Method, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use std::convert::Infallible;
use std::net::{SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// Request bodies go to hyper in frames of this size: hyper asks for the
/// next frame only when its write buffer has room (about 400 KiB), so the
/// time the last frame is handed over is close to the time it is sent.
const FRAME: usize = 256 << 10;
/// Bytes of an error response body kept to find its S3 error code.
const ERROR_BODY_MAX: usize = 16 << 10;
/// Bytes of a control response (metadata object, listings) kept.
const CONTROL_BODY_MAX: usize = 1 << 20;

/// Where the S3 service is.
pub struct Endpoint {
    /// As given, for messages and the summary.
    pub url: String,
    pub tls: bool,
    /// For TLS server name checks.
    pub host: String,
    /// The `Host` header (and what is signed): host, plus the port when not the scheme's default.
    pub host_header: String,
    pub addr: SocketAddr,
}

impl Endpoint {
    /// `http(s)://host[:port][/]`; resolved once here, so connects need no DNS.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(format!("target.endpoint {url:?} must start with http:// or https://"));
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
            return Err(format!("target.endpoint {url:?} must be scheme://host[:port], without a path"));
        }
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| format!("target.endpoint {url:?}: unclosed '['"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse::<u16>().map_err(|_| format!("target.endpoint {url:?}: bad port"))?,
                None if after.is_empty() => default_port,
                None => return Err(format!("target.endpoint {url:?}: bad port")),
            };
            (h.to_string(), port)
        } else {
            match rest.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p.parse::<u16>().map_err(|_| format!("target.endpoint {url:?}: bad port"))?),
                None => (rest.to_string(), default_port),
            }
        };
        if host.is_empty() {
            return Err(format!("target.endpoint {url:?} has no host"));
        }
        let shown = if host.contains(':') { format!("[{host}]") } else { host.clone() };
        let host_header = if port == default_port { shown } else { format!("{shown}:{port}") };
        let addr = (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve the host of {url}: {e}"))?
            .next()
            .ok_or_else(|| format!("the host of {url} has no address"))?;
        Ok(Endpoint { url: url.to_string(), tls, host, host_header, addr })
    }
}

/// The TLS client configuration: roots from `ca_file` (PEM; default: the
/// system bundle), TLS 1.2 and 1.3, ALPN http/1.1, and AES-128-GCM suites
/// first, as Go's client (and so warp and minio-go) orders them: a server that
/// follows the client's preference then runs the same cipher for both.
pub fn tls_config(ca_file: Option<&str>) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::CipherSuite as C;
    let path = ca_file.unwrap_or("/etc/ssl/certs/ca-certificates.crt");
    let what = if ca_file.is_some() { "target.ca_file" } else { "the system CA bundle" };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read {what} {path}: {e}"))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{what} {path} is not PEM certificates: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!("{what} {path} holds no usable CA certificate"));
    }
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites.sort_by_key(|s| {
        !matches!(
            s.suite(),
            C::TLS13_AES_128_GCM_SHA256
                | C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
                | C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        )
    });
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// What an op's task leaves for `reap` (monotonic ns; 0: did not happen).
pub struct Outcome {
    /// Body bytes received (GET, LIST) or 0; or the op's error.
    pub result: Result<u64, ErrKind>,
    pub hdr_ns: u64,
    pub first_ns: u64,
    /// When the last request body frame was handed to the connection (PUT).
    pub sent_ns: u64,
}

impl Default for Outcome {
    fn default() -> Self {
        Outcome { result: Ok(0), hdr_ns: 0, first_ns: 0, sent_ns: 0 }
    }
}

/// Everything the I/O threads share, for the life of the process.
pub struct Net {
    pub ep: Endpoint,
    pub tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    pub connect_timeout: Duration,
    /// Cloned per task: each keeps its own cached signing key.
    pub signer: Signer,
    /// Hash every body (`x-amz-content-sha256` = its SHA-256) instead of UNSIGNED-PAYLOAD.
    pub signed_payload: bool,
    pub reconnects: AtomicU64,
    pub retry: Option<Retry>,
    /// Retries sent, by the kind of the failure that caused them.
    pub retries: Mutex<BTreeMap<String, u64>>,
    /// Multipart uploads completed, parts sent, uploads aborted.
    pub mp_uploads: AtomicU64,
    pub mp_parts: AtomicU64,
    pub mp_aborted: AtomicU64,
    /// Negotiated TLS protocol and cipher suite (of the first connection).
    pub tls_info: Mutex<Option<(String, String)>>,
    /// Per slot.
    pub outcomes: Vec<Mutex<Outcome>>,
    sent_ns: Vec<AtomicU64>,
}

impl Net {
    pub fn new(
        ep: Endpoint,
        tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
        connect_timeout: Duration,
        signer: Signer,
        signed_payload: bool,
        retry: Option<Retry>,
        slots: usize,
    ) -> &'static Net {
        Box::leak(Box::new(Net {
            ep,
            tls,
            connect_timeout,
            signer,
            signed_payload,
            reconnects: AtomicU64::new(0),
            retry,
            retries: Mutex::new(BTreeMap::new()),
            mp_uploads: AtomicU64::new(0),
            mp_parts: AtomicU64::new(0),
            mp_aborted: AtomicU64::new(0),
            tls_info: Mutex::new(None),
            outcomes: (0..slots).map(|_| Mutex::new(Outcome::default())).collect(),
            sent_ns: (0..slots).map(|_| AtomicU64::new(0)).collect(),
        }))
    }
}

/// One S3 request: path and query already in canonical (encoded, sorted) form.
pub struct Req {
    pub method: Method,
    pub path: String,
    pub query: String,
    /// Inclusive byte range.
    pub range: Option<(u64, u64)>,
    pub body: Bytes,
}

/// An op for a slot's task.
pub struct Op {
    pub req: Req,
    /// PUT as a multipart upload: (part size, parts in flight).
    pub multipart: Option<(u64, u32)>,
    /// GET: copy the body here (verify), at most `len` bytes; null: discard it.
    pub copy_to: *mut u8,
    pub len: usize,
    pub done: &'static Done,
}

// SAFETY: copy_to points into the slot's buffer, which lives for the process
// and is not touched by the engine while the op is in flight (io.rs).
unsafe impl Send for Op {}

/// A request for the control connection (buckets, metadata), answered on a std channel.
struct Ctl {
    req: Req,
    reply: std::sync::mpsc::Sender<Result<Response, ErrKind>>,
}

/// A whole response: status, S3 error code (non-2xx), body bytes and timestamps.
pub struct Response {
    pub status: u16,
    pub code: String,
    /// The ETag header (multipart parts).
    pub etag: Option<String>,
    pub bytes: u64,
    /// The body when kept (control requests, errors), capped.
    pub body: Vec<u8>,
    hdr_ns: u64,
    first_ns: u64,
}

/// A request body served from one `Bytes` (a slot's buffer, without a copy)
/// in frames; notes when the last frame is handed over.
pub struct ReqBody {
    data: Bytes,
    pos: usize,
    sent: Option<&'static AtomicU64>,
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.pos >= this.data.len() {
            return Poll::Ready(None);
        }
        let end = (this.pos + FRAME).min(this.data.len());
        let chunk = this.data.slice(this.pos..end);
        this.pos = end;
        if end == this.data.len()
            && let Some(s) = this.sent
        {
            s.store(mono_ns(), Ordering::Relaxed);
        }
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact((self.data.len() - self.pos) as u64)
    }
}

type Conn = SendRequest<ReqBody>;

/// The errno (or TLS failure) behind an I/O error.
fn io_kind(e: &std::io::Error) -> ErrKind {
    use std::io::ErrorKind as K;
    if let Some(t) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        return ErrKind::Tls(tls_name(t));
    }
    if let Some(n) = e.raw_os_error() {
        return ErrKind::Errno(n);
    }
    ErrKind::Errno(match e.kind() {
        K::ConnectionRefused => libc::ECONNREFUSED,
        K::ConnectionReset | K::UnexpectedEof => libc::ECONNRESET,
        K::ConnectionAborted => libc::ECONNABORTED,
        K::BrokenPipe => libc::EPIPE,
        K::TimedOut => libc::ETIMEDOUT,
        K::NotConnected => libc::ENOTCONN,
        K::InvalidData => libc::EPROTO,
        _ => libc::EIO,
    })
}

/// A short name for a TLS failure: "certificate UnknownIssuer", "alert HandshakeFailure", ...
fn tls_name(e: &rustls::Error) -> String {
    let word = |d: String| d.split(|c: char| !c.is_ascii_alphanumeric()).next().unwrap_or("").to_string();
    match e {
        rustls::Error::InvalidCertificate(c) => format!("certificate {}", word(format!("{c:?}"))),
        rustls::Error::AlertReceived(a) => format!("alert {}", word(format!("{a:?}"))),
        other => word(format!("{other:?}")),
    }
}

/// The kind of a hyper failure: the errno or TLS failure underneath when
/// there is one; a connection the server closed mid-request is ECONNRESET.
fn hyper_kind(e: &hyper::Error) -> ErrKind {
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io_kind(io);
        }
        if let Some(t) = s.downcast_ref::<rustls::Error>() {
            return ErrKind::Tls(tls_name(t));
        }
        src = s.source();
    }
    ErrKind::Errno(if e.is_incomplete_message() || e.is_closed() {
        libc::ECONNRESET
    } else if e.is_canceled() {
        libc::ECANCELED
    } else if e.is_parse() {
        libc::EPROTO
    } else if e.is_timeout() {
        libc::ETIMEDOUT
    } else {
        libc::EIO
    })
}

/// The `<Code>` of an S3 XML error body (only letters and digits kept).
pub fn error_code(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    text.split_once("<Code>")
        .and_then(|(_, rest)| rest.split_once("</Code>"))
        .map(|(code, _)| code.chars().filter(|c| c.is_ascii_alphanumeric()).take(64).collect())
        .unwrap_or_default()
}

/// Open a connection (TCP, TLS when asked, HTTP/1.1 handshake), bounded by
/// the connect timeout; its driver runs as a task of this thread.
async fn connect(net: &'static Net) -> Result<Conn, (ErrKind, String)> {
    let t = net.connect_timeout;
    let timed_out = || (ErrKind::Errno(libc::ETIMEDOUT), format!("no connection within {} s", t.as_secs_f64()));
    let tcp = match tokio::time::timeout(t, tokio::net::TcpStream::connect(net.ep.addr)).await {
        Err(_) => return Err(timed_out()),
        Ok(Err(e)) => return Err((io_kind(&e), e.to_string())),
        Ok(Ok(s)) => s,
    };
    let _ = tcp.set_nodelay(true);
    let handshake_err = |e: hyper::Error| (hyper_kind(&e), e.to_string());
    match &net.tls {
        None => {
            let tcp = super::sendfile::Stream(tcp);
            let (send, conn) = http1::Builder::new().handshake(TokioIo::new(tcp)).await.map_err(handshake_err)?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok(send)
        }
        Some((cfg, name)) => {
            let c = tokio_rustls::TlsConnector::from(cfg.clone());
            let tls = match tokio::time::timeout(t, c.connect(name.clone(), tcp)).await {
                Err(_) => return Err(timed_out()),
                Ok(Err(e)) => return Err((io_kind(&e), e.to_string())),
                Ok(Ok(s)) => s,
            };
            {
                let mut info = net.tls_info.lock().unwrap_or_else(|p| p.into_inner());
                if info.is_none() {
                    let (_, state) = tls.get_ref();
                    let proto = state.protocol_version().map(|v| format!("{v:?}")).unwrap_or_default();
                    let suite = state.negotiated_cipher_suite().map(|s| format!("{:?}", s.suite())).unwrap_or_default();
                    *info = Some((proto, suite));
                }
            }
            let (send, conn) = http1::Builder::new().handshake(TokioIo::new(tls)).await.map_err(handshake_err)?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok(send)
        }
    }
}

fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A task's connection with what it needs to use it: its signer (own
/// cached key) and where reopenings are counted (None: not counted).
struct Link {
    net: &'static Net,
    conn: Option<Conn>,
    signer: Signer,
    reconnects: Option<&'static AtomicU64>,
}

/// Send one request on the link's connection (opened first if it is not, or
/// if the server closed it while idle) and read the whole response. `copy`:
/// where a 2xx body goes; `keep`: keep the body (capped) whatever the status.
async fn exec(
    link: &mut Link,
    req: &Req,
    sent: Option<&'static AtomicU64>,
    mut copy: Option<&mut [u8]>,
    keep: bool,
) -> Result<Response, ErrKind> {
    let net = link.net;
    let usable = match link.conn.as_mut() {
        Some(c) if !c.is_closed() => c.ready().await.is_ok(),
        _ => false,
    };
    if !usable {
        let had = link.conn.is_some();
        link.conn = None;
        link.conn = Some(connect(net).await.map_err(|e| e.0)?);
        if let (true, Some(r)) = (had, link.reconnects) {
            r.fetch_add(1, Ordering::Relaxed);
        }
    }
    let conn = &mut link.conn;
    let c = conn.as_mut().expect("connected above");
    let amz = sigv4::amz_date(now_s());
    let payload = if net.signed_payload { sigv4::sha256_hex(&req.body) } else { sigv4::UNSIGNED.to_string() };
    let range = req.range.map(|(a, b)| format!("bytes={a}-{b}"));
    let mut signed: Vec<(&str, &str)> = Vec::with_capacity(5);
    signed.push(("host", &net.ep.host_header));
    if let Some(r) = &range {
        signed.push(("range", r));
    }
    signed.push(("x-amz-content-sha256", &payload));
    signed.push(("x-amz-date", &amz));
    let auth = link.signer.authorization(req.method.as_str(), &req.path, &req.query, &signed, &payload, &amz);
    let uri = if req.query.is_empty() { req.path.clone() } else { format!("{}?{}", req.path, req.query) };
    let mut b = http::Request::builder()
        .method(req.method.clone())
        .uri(uri)
        .header(header::HOST, &net.ep.host_header)
        .header("x-amz-date", &amz)
        .header("x-amz-content-sha256", &payload)
        .header(header::AUTHORIZATION, auth);
    if let Some(r) = &range {
        b = b.header(header::RANGE, r);
    }
    if req.method == Method::PUT || req.method == Method::POST || !req.body.is_empty() {
        b = b.header(header::CONTENT_LENGTH, req.body.len());
    }
    let request =
        b.body(ReqBody { data: req.body.clone(), pos: 0, sent }).map_err(|_| ErrKind::Errno(libc::EINVAL))?;
    let resp = match c.send_request(request).await {
        Ok(r) => r,
        Err(e) => {
            *conn = None;
            return Err(hyper_kind(&e));
        }
    };
    let hdr_ns = mono_ns();
    let status = resp.status().as_u16();
    let etag = resp.headers().get(header::ETAG).and_then(|v| v.to_str().ok()).map(String::from);
    let ok = (200..300).contains(&status);
    let cap = if keep { CONTROL_BODY_MAX } else if ok { 0 } else { ERROR_BODY_MAX };
    let mut body = resp.into_body();
    let (mut n, mut first_ns) = (0u64, 0u64);
    let mut kept = Vec::new();
    while let Some(f) = body.frame().await {
        let f = match f {
            Ok(f) => f,
            Err(e) => {
                *conn = None;
                return Err(hyper_kind(&e));
            }
        };
        let Ok(d) = f.into_data() else { continue };
        if d.is_empty() {
            continue;
        }
        if first_ns == 0 {
            first_ns = mono_ns();
        }
        if ok && let Some(buf) = copy.as_deref_mut() {
            let at = (n as usize).min(buf.len());
            let k = (buf.len() - at).min(d.len());
            buf[at..at + k].copy_from_slice(&d[..k]);
        }
        if kept.len() < cap {
            let k = (cap - kept.len()).min(d.len());
            kept.extend_from_slice(&d[..k]);
        }
        n += d.len() as u64;
    }
    let code = if ok { String::new() } else { error_code(&kept) };
    Ok(Response { status, code, etag, bytes: n, body: kept, hdr_ns, first_ns })
}

/// A slot's task: open the connection, report it, then run the slot's ops.
async fn slot_task(
    net: &'static Net,
    idx: usize,
    mut rx: UnboundedReceiver<Op>,
    ready: std::sync::mpsc::Sender<Result<(), (ErrKind, String)>>,
) {
    let conn = match connect(net).await {
        Ok(c) => {
            let _ = ready.send(Ok(()));
            Some(c)
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    drop(ready);
    let mut link = Link { net, conn, signer: net.signer.clone(), reconnects: Some(&net.reconnects) };
    // Multipart: the slot's further connections (parts in flight beyond the first).
    let mut extra: Vec<Link> = Vec::new();
    let sent: &'static AtomicU64 = &net.sent_ns[idx];
    while let Some(op) = rx.recv().await {
        let mut attempt = 0u32;
        let out = loop {
            sent.store(0, Ordering::Relaxed);
            let out = match op.multipart {
                Some((part, inflight)) => multipart_put(&mut link, &mut extra, &op.req, part, inflight).await,
                None => {
                    // SAFETY: see Op: the slot's buffer, untouched by the engine until complete().
                    let copy =
                        (!op.copy_to.is_null()).then(|| unsafe { std::slice::from_raw_parts_mut(op.copy_to, op.len) });
                    one_op(&mut link, &op.req, copy, sent).await
                }
            };
            let Err(e) = &out.result else { break out };
            match &net.retry {
                Some(r) if attempt < r.max && r.covers(e) => {
                    *net.retries.lock().unwrap_or_else(|p| p.into_inner()).entry(e.name()).or_insert(0) += 1;
                    tokio::time::sleep(r.backoff(attempt)).await;
                    attempt += 1;
                }
                _ => break out,
            }
        };
        *net.outcomes[idx].lock().unwrap_or_else(|p| p.into_inner()) = out;
        op.done.complete();
    }
}

/// One request for an op, its outcome.
async fn one_op(link: &mut Link, req: &Req, copy: Option<&mut [u8]>, sent: &'static AtomicU64) -> Outcome {
    let put = req.method == Method::PUT;
    match exec(link, req, put.then_some(sent), copy, false).await {
        Ok(r) => Outcome {
            result: if (200..300).contains(&r.status) {
                Ok(r.bytes)
            } else {
                Err(ErrKind::Http { status: r.status, code: r.code })
            },
            hdr_ns: r.hdr_ns,
            first_ns: r.first_ns,
            sent_ns: sent.load(Ordering::Relaxed),
        },
        Err(e) => Outcome { result: Err(e), ..Outcome::default() },
    }
}

/// A whole response's status as a result: its error kind unless 2xx (and,
/// for CompleteMultipartUpload, unless a 200 carries an `<Error>` body).
fn status_result(r: &Response) -> Result<(), ErrKind> {
    let in_body = r.status == 200 && r.body.windows(7).any(|w| w == b"<Error>");
    if (200..300).contains(&r.status) && !in_body {
        return Ok(());
    }
    let code = if in_body { error_code(&r.body) } else { r.code.clone() };
    Err(ErrKind::Http { status: if in_body { 500 } else { r.status }, code })
}

/// The text between `<tag>` and `</tag>` in an XML body.
fn xml_value(body: &[u8], tag: &str) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let (_, rest) = text.split_once(&format!("<{tag}>"))?;
    let (v, _) = rest.split_once(&format!("</{tag}>"))?;
    Some(v.to_string())
}

/// A PUT as a multipart upload: create, the parts (`inflight` at a time on
/// the slot's connections), complete; on any failure abort it.
async fn multipart_put(link: &mut Link, extra: &mut Vec<Link>, req: &Req, part: u64, inflight: u32) -> Outcome {
    let net = link.net;
    let sub = |method: Method, query: String, body: Bytes| Req {
        method,
        path: req.path.clone(),
        query,
        range: None,
        body,
    };
    let created = match exec(link, &sub(Method::POST, "uploads=".into(), Bytes::new()), None, None, true).await {
        Ok(r) => status_result(&r).map(|_| xml_value(&r.body, "UploadId")),
        Err(e) => Err(e),
    };
    let id = match created {
        Ok(Some(id)) => id,
        Ok(None) => return Outcome { result: Err(ErrKind::Errno(libc::EPROTO)), ..Outcome::default() },
        Err(e) => return Outcome { result: Err(e), ..Outcome::default() },
    };
    let id_q = sigv4::encode(&id);
    let size = req.body.len() as u64;
    let parts = size.div_ceil(part).max(1);
    while extra.len() + 1 < (inflight as usize).min(parts as usize) {
        extra.push(Link { net, conn: None, signer: net.signer.clone(), reconnects: Some(&net.reconnects) });
    }
    // Part i (1-based) goes to worker (i - 1) % workers: each worker one connection, parts in order.
    let workers = 1 + extra.len().min(parts as usize - 1);
    let part_req = |i: u64| {
        let (a, b) = ((i - 1) * part, (i * part).min(size));
        sub(Method::PUT, format!("partNumber={i}&uploadId={id_q}"), req.body.slice(a as usize..b as usize))
    };
    let share =
        |w: usize| -> Vec<(u64, Req)> { (1..=parts).filter(|i| (i - 1) as usize % workers == w).map(|i| (i, part_req(i))).collect() };
    let mut futs = vec![part_worker(link, share(0))];
    for (w, l) in extra.iter_mut().enumerate().take(workers - 1) {
        futs.push(part_worker(l, share(w + 1)));
    }
    let mut tags: Vec<(u64, String)> = Vec::with_capacity(parts as usize);
    let mut failed = None;
    for r in join_all(futs).await {
        match r {
            Ok(t) => tags.extend(t),
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    let result = match failed {
        Some(e) => Err(e),
        None => {
            tags.sort();
            let mut xml = String::from("<CompleteMultipartUpload>");
            for (i, t) in &tags {
                xml.push_str(&format!("<Part><PartNumber>{i}</PartNumber><ETag>{t}</ETag></Part>"));
            }
            xml.push_str("</CompleteMultipartUpload>");
            match exec(link, &sub(Method::POST, format!("uploadId={id_q}"), Bytes::from(xml)), None, None, true).await {
                Ok(r) => status_result(&r).map(|_| r.hdr_ns),
                Err(e) => Err(e),
            }
        }
    };
    match result {
        Ok(hdr_ns) => {
            net.mp_uploads.fetch_add(1, Ordering::Relaxed);
            Outcome { result: Ok(0), hdr_ns, first_ns: 0, sent_ns: 0 }
        }
        Err(e) => {
            // Best effort: parts left behind would hold space until the bucket is purged.
            let _ = exec(link, &sub(Method::DELETE, format!("uploadId={id_q}"), Bytes::new()), None, None, false).await;
            net.mp_aborted.fetch_add(1, Ordering::Relaxed);
            Outcome { result: Err(e), ..Outcome::default() }
        }
    }
}

/// One connection's share of a multipart upload's parts, in order: (part number, ETag).
async fn part_worker(l: &mut Link, reqs: Vec<(u64, Req)>) -> Result<Vec<(u64, String)>, ErrKind> {
    let mut tags = Vec::with_capacity(reqs.len());
    for (i, r) in reqs {
        let resp = exec(l, &r, None, None, false).await?;
        status_result(&resp)?;
        tags.push((i, resp.etag.ok_or(ErrKind::Errno(libc::EPROTO))?));
        l.net.mp_parts.fetch_add(1, Ordering::Relaxed);
    }
    Ok(tags)
}

/// Poll futures on this task until all are done (parts in flight on one
/// current-thread runtime; no spawning, so they may borrow).
async fn join_all<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match std::future::Future::poll(f.as_mut(), cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending { Poll::Pending } else { Poll::Ready(()) }
    })
    .await;
    out.into_iter().map(|o| o.expect("every future finished")).collect()
}

async fn ctl_task(net: &'static Net, mut rx: UnboundedReceiver<Ctl>) {
    let mut link = Link { net, conn: None, signer: net.signer.clone(), reconnects: None };
    while let Some(c) = rx.recv().await {
        let r = exec(&mut link, &c.req, None, None, true).await;
        let _ = c.reply.send(r);
    }
}

/// The running I/O threads: one op channel per slot, one control channel.
pub struct Io {
    senders: Vec<UnboundedSender<Op>>,
    ctl: UnboundedSender<Ctl>,
}

impl Io {
    /// Start `threads` I/O threads and open one connection per slot (slot
    /// `i` on thread `i % threads`); returns once all are open, or with the
    /// first failure.
    pub fn start(net: &'static Net, slots: usize, threads: usize) -> Result<Io, (ErrKind, String)> {
        let threads = threads.clamp(1, slots.max(1));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let mut mine: Vec<Vec<(usize, UnboundedReceiver<Op>)>> = (0..threads).map(|_| Vec::new()).collect();
        let mut senders = Vec::with_capacity(slots);
        for i in 0..slots {
            let (tx, rx) = unbounded_channel();
            senders.push(tx);
            mine[i % threads].push((i, rx));
        }
        let (ctl, ctl_rx) = unbounded_channel();
        let mut ctl_rx = Some(ctl_rx);
        for (t, slots_of_t) in mine.into_iter().enumerate() {
            let ready = ready_tx.clone();
            let ctl_rx = ctl_rx.take();
            std::thread::Builder::new()
                .name(format!("s3-io-{t}"))
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_io()
                        .enable_time()
                        .build()
                        .expect("a tokio runtime");
                    rt.block_on(async move {
                        if let Some(rx) = ctl_rx {
                            tokio::spawn(ctl_task(net, rx));
                        }
                        for (i, rx) in slots_of_t {
                            tokio::spawn(slot_task(net, i, rx, ready.clone()));
                        }
                        drop(ready);
                        // The thread serves until the process exits.
                        std::future::pending::<()>().await;
                    });
                })
                .map_err(|e| (ErrKind::Errno(e.raw_os_error().unwrap_or(libc::EAGAIN)), e.to_string()))?;
        }
        drop(ready_tx);
        let wait = net.connect_timeout * 2 + Duration::from_secs(5);
        let deadline = Instant::now() + wait;
        for _ in 0..slots {
            let left = deadline.saturating_duration_since(Instant::now());
            match ready_rx.recv_timeout(left) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err((
                        ErrKind::Errno(libc::ETIMEDOUT),
                        format!("{slots} connections were not open within {:.0} s", wait.as_secs_f64()),
                    ));
                }
            }
        }
        Ok(Io { senders, ctl })
    }

    /// Hand an op to slot `idx`'s task (never blocks).
    pub fn send(&self, idx: usize, op: Op) -> Result<(), ErrKind> {
        self.senders[idx].send(op).map_err(|_| ErrKind::Errno(libc::ESHUTDOWN))
    }

    /// A request on the control connection, waited for at most `timeout`.
    pub fn call(&self, req: Req, timeout: Duration) -> Result<Response, ErrKind> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.ctl.send(Ctl { req, reply: tx }).map_err(|_| ErrKind::Errno(libc::ESHUTDOWN))?;
        rx.recv_timeout(timeout).map_err(|_| ErrKind::Timeout)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_with_their_host_header() {
        let e = Endpoint::parse("http://127.0.0.1:7480").unwrap();
        assert_eq!((e.tls, e.host.as_str(), e.host_header.as_str()), (false, "127.0.0.1", "127.0.0.1:7480"));
        assert_eq!(e.addr, "127.0.0.1:7480".parse().unwrap());
        let e = Endpoint::parse("https://127.0.0.1/").unwrap();
        assert_eq!((e.tls, e.host_header.as_str(), e.addr.port()), (true, "127.0.0.1", 443));
        let e = Endpoint::parse("http://[::1]:8000").unwrap();
        assert_eq!((e.host.as_str(), e.host_header.as_str()), ("::1", "[::1]:8000"));
        for bad in ["127.0.0.1:80", "ftp://x", "http://", "http://h:x", "http://h:1/path", "http://u@h"] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn s3_error_codes_come_from_the_xml_body() {
        let b = br#"<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchBucket</Code><BucketName>b</BucketName></Error>"#;
        assert_eq!(error_code(b), "NoSuchBucket");
        assert_eq!(error_code(b"<Error><Code>Slow<x>Down</Code>"), "SlowxDown");
        assert_eq!(error_code(b"not xml"), "");
    }

    #[test]
    fn request_bodies_come_in_frames_and_note_the_last() {
        let sent: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        let data = Bytes::from(vec![7u8; FRAME * 2 + 10]);
        let mut b = ReqBody { data, pos: 0, sent: Some(sent) };
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut sizes = Vec::new();
        while let Poll::Ready(Some(Ok(f))) = Pin::new(&mut b).poll_frame(&mut cx) {
            assert_eq!(sent.load(Ordering::Relaxed) != 0, sizes.len() == 2);
            sizes.push(f.into_data().unwrap().len());
        }
        assert_eq!(sizes, vec![FRAME, FRAME, 10]);
        assert!(b.is_end_stream());
    }
}
