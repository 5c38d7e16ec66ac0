"""A raw-socket HTTP/1.1 upstream for hostile-input tests (tests/integration/e2e/test_hostile.py).

Unlike upstream.py (http.server), it parses requests itself and RECORDS the exact bytes of every
request head it receives, and each body as framed (Content-Length or chunked), per connection,
so a test can assert what the gateway forwarded byte for byte. It runs in the test's own process,
on threads (one accepting, one per connection), bound to 127.0.0.1:0.

    up = RawUpstream("normal").start()
    ...                               # point the gateway at up.url
    mark = up.mark()
    ...                               # one request through the gateway
    [req] = up.requests_since(mark)   # req.line == "GET /p HTTP/1.1", req.headers, req.body
    up.stop()

Behaviours (one per instance), each a real upstream's:

- "normal": answers every request 200 with a small JSON body naming only the path it saw and
  where ({"seen": "/p", "conn": 3, "n": 0}), keep-alive (unless the request asked to close).
- "ignores_get_bodies": a stock server that never reads a GET's (or HEAD's) body: it answers
  the head, then parses the body's bytes as the next request on the connection and answers that
  too, after `get_body_delay_ms` (so the gateway has pooled the connection by then).
- "reset_after_reading_post": reads a POST or DELETE request (or any request whose path holds
  "/reset/") whole, records it as executed, then resets the connection (SO_LINGER 0) without
  answering. Other requests are answered as "normal" (so a test can fill the gateway's pool).
- "hold": records every request, then holds its answer until release() / release_all().

With idle_close_ms=N (any behaviour), a keep-alive connection is closed after N ms without a
request, like Node's keepAliveTimeout. With hold_prefix="/p/" (or a tuple of prefixes; any
behaviour), requests whose path starts so are held as "hold" holds them; with large_prefix, a
request for
"/p/<n>" is answered with a body of n bytes, written 64 KiB at a time (the write blocks while
the gateway does not read; a connection the gateway closes ends it).

Python 3 standard library only. Every thread is bounded by the stop flag and joined in stop();
every wait is bounded.
"""
import json
import select
import socket
import struct
import threading
import time

BEHAVIOURS = ("normal", "ignores_get_bodies", "reset_after_reading_post", "hold")
MAX_HEAD_BYTES = 64 * 1024
POLL_S = 0.05  # how often a blocked thread looks at the stop flag


class Request:
    """One request as the upstream received it."""

    def __init__(self, conn_id, index, head, start_time):
        self.conn_id = conn_id
        self.index = index          # its place on its connection: 0, 1, ...
        self.head = head            # the exact bytes, request line to the blank line included
        self.time = start_time      # time.monotonic() when its head was complete
        self.body = b""             # as framed (chunked: the decoded bytes)
        self.chunked = False
        self.reset = False          # reset_after_reading_post: answered with a reset
        self.answered = False       # its answer was written whole
        lines = head.split(b"\r\n")
        self.line = lines[0].decode("latin-1")
        parts = self.line.split(" ")
        self.method = parts[0] if parts else ""
        self.target = parts[1] if len(parts) > 1 else ""
        self.version = parts[2] if len(parts) > 2 else ""
        self.headers = []           # [(name, value)], names as sent, in order
        for raw in lines[1:]:
            if not raw:
                continue
            name, _, value = raw.decode("latin-1").partition(":")
            self.headers.append((name, value.strip(" \t")))

    @property
    def path(self):
        return self.target.split("?", 1)[0]

    def values(self, name):
        """Every value of the fields named `name` (case-insensitive, exact spelling otherwise)."""
        n = name.lower()
        return [v for k, v in self.headers if k.lower() == n]

    def get(self, name, default=None):
        v = self.values(name)
        return v[0] if v else default

    def names(self):
        return [k for k, _ in self.headers]

    def __repr__(self):
        return "<Request conn=%d #%d %r %r body=%r>" % (self.conn_id, self.index, self.line,
                                                         self.headers, self.body[:100])


class Connection:
    """One connection the gateway opened."""

    def __init__(self, conn_id, sock):
        self.id = conn_id
        self.sock = sock
        self.requests = []
        self.closed_by = None       # "upstream-idle", "upstream-reset", "peer", "error", "stop"
        self.opened = time.monotonic()


class RawUpstream:
    def __init__(self, behaviour="normal", idle_close_ms=None, get_body_delay_ms=30,
                 hold_prefix=None, large_prefix=None):
        if behaviour not in BEHAVIOURS:
            raise ValueError("behaviour must be one of %s" % (BEHAVIOURS,))
        self.behaviour = behaviour
        self.hold_prefix = hold_prefix
        self.large_prefix = large_prefix
        self.idle_close_ms = idle_close_ms
        self.get_body_delay_ms = get_body_delay_ms
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._connections = []
        self._requests = []         # every request, in the order their heads completed
        self._threads = []
        self._held = 0              # hold: answers waiting now
        self._release_budget = 0
        self._release_all = False
        self._listener = None
        self.port = None
        self.errors = []            # unexpected exceptions in the threads (a test may assert [])

    # Life cycle.

    def start(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen(128)
        s.settimeout(POLL_S)
        self._listener = s
        self.port = s.getsockname()[1]
        t = threading.Thread(target=self._accept_loop, name="raw-upstream-accept", daemon=True)
        self._threads.append(t)
        t.start()
        return self

    def stop(self, timeout=5.0):
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
            conns = list(self._connections)
        for c in conns:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        end = time.monotonic() + timeout
        for t in list(self._threads):
            t.join(timeout=max(0.0, end - time.monotonic()))
        if self._listener is not None:
            self._listener.close()
        for c in conns:
            try:
                c.sock.close()
            except OSError:
                pass

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    # What the tests read.

    def requests(self):
        with self._lock:
            return list(self._requests)

    def mark(self):
        """A position in the request record, for requests_since()."""
        with self._lock:
            return len(self._requests)

    def requests_since(self, mark):
        with self._lock:
            return list(self._requests[mark:])

    def connections(self):
        with self._lock:
            return list(self._connections)

    def wait_requests(self, count, since=0, timeout=5.0):
        """Waits (bounded) until at least `count` requests arrived after `since`."""
        end = time.monotonic() + timeout
        with self._lock:
            while len(self._requests) - since < count:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, POLL_S))
            return True

    def wait_for(self, predicate, timeout=5.0):
        """Waits (bounded) until predicate(upstream) holds, re-checked whenever a request is
        recorded or answered or a connection ends; returns whether it did."""
        end = time.monotonic() + timeout
        with self._lock:
            while True:
                self._lock.release()
                try:
                    ok = predicate(self)
                finally:
                    self._lock.acquire()
                if ok:
                    return True
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, POLL_S))

    def executions(self, method, path):
        """How many requests with this method and path (query excluded) were received whole."""
        return sum(1 for r in self.requests() if r.method == method and r.path == path)

    # hold.

    @property
    def held(self):
        with self._lock:
            return self._held

    def wait_held(self, count, timeout=5.0):
        end = time.monotonic() + timeout
        with self._lock:
            while self._held < count:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, POLL_S))
            return True

    def release(self, n=1):
        with self._lock:
            self._release_budget += n
            self._lock.notify_all()

    def release_all(self):
        with self._lock:
            self._release_all = True
            self._lock.notify_all()

    def hold_again(self):
        """Undoes release_all(): answers are held again from now on."""
        with self._lock:
            self._release_all = False
            self._release_budget = 0

    # Threads.

    def _accept_loop(self):
        next_id = 0
        while not self._stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(next_id, sock)
            next_id += 1
            with self._lock:
                self._connections.append(conn)
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True,
                                 name="raw-upstream-%d" % conn.id)
            self._threads.append(t)
            t.start()

    def _serve(self, conn):
        reader = _Reader(conn.sock, self._stop)
        from_ignored_body = False  # ignores_get_bodies: the next head may be a GET's body
        try:
            while not self._stop.is_set():
                idle = self.idle_close_ms / 1000.0 if self.idle_close_ms else None
                head = reader.read_head(idle_timeout=idle)
                if head is None:
                    conn.closed_by = reader.why or "peer"
                    break
                req = Request(conn.id, len(conn.requests), head, time.monotonic())
                ignore_body = (self.behaviour == "ignores_get_bodies" and
                               req.method in ("GET", "HEAD"))
                if not ignore_body and not self._read_body(reader, req):
                    conn.closed_by = reader.why or "peer"
                    self._record(conn, req)
                    break
                self._record(conn, req)
                if from_ignored_body and self.get_body_delay_ms:
                    # A request that was a GET's body: answered a moment later, once the gateway
                    # has taken the first answer and pooled the connection.
                    time.sleep(self.get_body_delay_ms / 1000.0)
                from_ignored_body = ignore_body and int(req.get("Content-Length", "0") or 0) > 0
                if self.behaviour == "reset_after_reading_post" and (
                        req.method in ("POST", "DELETE") or "/reset/" in req.path):
                    req.reset = True
                    conn.closed_by = "upstream-reset"
                    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                         struct.pack("ii", 1, 0))
                    conn.sock.close()
                    return
                held = self.behaviour == "hold" or (
                    self.hold_prefix is not None and req.path.startswith(self.hold_prefix))
                if held and not self._wait_release():
                    conn.closed_by = "stop"
                    break
                if self.large_prefix is not None and req.path.startswith(self.large_prefix):
                    if not self._send_large(conn, req):
                        break
                    continue
                close = self._wants_close(req)
                conn.sock.sendall(self._answer(conn, req, close))
                with self._lock:
                    req.answered = True
                    self._lock.notify_all()
                if close:
                    conn.closed_by = "upstream-close"
                    break
        except (OSError, ValueError) as e:
            if not self._stop.is_set():
                conn.closed_by = "error"
                with self._lock:
                    self.errors.append("conn %d: %r" % (conn.id, e))
        finally:
            try:
                conn.sock.close()
            except OSError:
                pass

    def _send_large(self, conn, req):
        """Answers with the number of bytes the path ends with; False when the connection ended
        first (the gateway closed it)."""
        n = int(req.path.rsplit("/", 1)[1])
        head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
        head += "Content-Length: %d\r\n\r\n" % n
        block = b"x" * 65536
        try:
            conn.sock.sendall(head.encode())
            while n > 0 and not self._stop.is_set():
                conn.sock.sendall(block[:min(n, len(block))])
                n -= min(n, len(block))
        except OSError:
            conn.closed_by = "peer"
            return False
        with self._lock:
            req.answered = n == 0
            self._lock.notify_all()
        return n == 0

    def _record(self, conn, req):
        with self._lock:
            conn.requests.append(req)
            self._requests.append(req)
            self._lock.notify_all()

    def _read_body(self, reader, req):
        te = ",".join(req.values("Transfer-Encoding")).lower()
        if te:
            if te.replace(" ", "").split(",")[-1] != "chunked":
                raise ValueError("unsupported Transfer-Encoding %r" % te)
            req.chunked = True
            body = b""
            for _ in range(1_000_000):
                line = reader.read_line()
                if line is None:
                    return False
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    for _ in range(1000):  # trailers
                        t = reader.read_line()
                        if t is None:
                            return False
                        if t == b"":
                            break
                    req.body = body
                    return True
                data = reader.read_exact(size + 2)
                if data is None:
                    return False
                body += data[:-2]
            raise ValueError("too many chunks")
        lengths = req.values("Content-Length")
        if lengths:
            n = int(lengths[0])
            data = reader.read_exact(n) if n else b""
            if data is None:
                return False
            req.body = data
        return True

    def _wait_release(self):
        with self._lock:
            self._held += 1
            self._lock.notify_all()
            try:
                while not self._stop.is_set():
                    if self._release_all:
                        return True
                    if self._release_budget > 0:
                        self._release_budget -= 1
                        return True
                    self._lock.wait(POLL_S)
                return False
            finally:
                self._held -= 1
                self._lock.notify_all()

    @staticmethod
    def _wants_close(req):
        conn = ",".join(req.values("Connection")).lower()
        tokens = [t.strip() for t in conn.split(",")]
        if req.version == "HTTP/1.0":
            return "keep-alive" not in tokens
        return "close" in tokens

    @staticmethod
    def _answer(conn, req, close):
        body = json.dumps({"seen": req.target, "conn": conn.id, "n": req.index}).encode()
        head = ("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
                % (len(body), "Connection: close\r\n" if close else "")).encode()
        return head if req.method == "HEAD" else head + body


class _Reader:
    """Buffered reads from one socket, each bounded by the stop flag (and an idle timeout)."""

    def __init__(self, sock, stop):
        self.sock = sock
        self.stop = stop
        self.buf = b""
        self.why = None

    def _fill(self, idle_timeout=None):
        """Reads more bytes; False on EOF, stop or idle timeout (self.why says which)."""
        start = time.monotonic()
        while not self.stop.is_set():
            wait = POLL_S
            if idle_timeout is not None:
                left = idle_timeout - (time.monotonic() - start)
                if left <= 0:
                    self.why = "upstream-idle"
                    try:
                        self.sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return False
                wait = min(wait, left)
            r, _, _ = select.select([self.sock], [], [], wait)
            if not r:
                continue
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                self.why = "peer-reset"
                return False
            if not data:
                self.why = "peer"
                return False
            self.buf += data
            return True
        self.why = "stop"
        return False

    def read_head(self, idle_timeout=None):
        first = True
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > MAX_HEAD_BYTES:
                raise ValueError("request head too large")
            # The idle timeout runs only between requests, before a request's first byte.
            if not self._fill(idle_timeout if first and not self.buf else None):
                return None
            first = False
        end = self.buf.index(b"\r\n\r\n") + 4
        head, self.buf = self.buf[:end], self.buf[end:]
        return head

    def read_line(self):
        while b"\r\n" not in self.buf:
            if len(self.buf) > MAX_HEAD_BYTES or not self._fill():
                return None
        end = self.buf.index(b"\r\n")
        line, self.buf = self.buf[:end], self.buf[end + 2:]
        return line

    def read_exact(self, n):
        while len(self.buf) < n:
            if not self._fill():
                return None
        data, self.buf = self.buf[:n], self.buf[n:]
        return data
