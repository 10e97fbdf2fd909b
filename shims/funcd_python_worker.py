# The python3 runtime's worker, started through funcd-python.py: serves a
# handler on the worker contract (docs/worker-contract.md): HTTP/1.1 keep-alive
# on the Unix socket FUNCD_LISTEN, a thread per connection, GET /_/ready, drain
# on SIGTERM.
#
# Start-up time is the point of this file: it imports only C modules that are
# already loaded or cost nothing (_socket, _thread, _signal, select); json,
# asyncio and traceback are imported on first use.
import os
import sys
import _signal
import _socket
import _thread
import select
from time import sleep

MAX_HEAD = 64 * 1024
MAX_BODY = 64 << 20
READY_PATH = '/_/ready'
# The exit status that tells the platform the handler could not be loaded
# (docs/worker-contract.md): the Function becomes HandlerLoadFailed.
EXIT_HANDLER_LOAD = 3

_ESCAPES = {i: '\\u%04x' % i for i in range(32)}
_ESCAPES.update({ord('"'): '\\"', ord('\\'): '\\\\', ord('\n'): '\\n', ord('\r'): '\\r', ord('\t'): '\\t'})
_REASONS = {200: 'OK', 201: 'Created', 202: 'Accepted', 204: 'No Content', 301: 'Moved Permanently',
            302: 'Found', 304: 'Not Modified', 400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden',
            404: 'Not Found', 405: 'Method Not Allowed', 409: 'Conflict', 411: 'Length Required',
            413: 'Content Too Large', 422: 'Unprocessable Content', 429: 'Too Many Requests',
            431: 'Request Header Fields Too Large', 500: 'Internal Server Error', 502: 'Bad Gateway',
            503: 'Service Unavailable', 504: 'Gateway Timeout'}
_HEX = frozenset(b'0123456789abcdefABCDEF')
_FRAMING = frozenset(('content-length', 'transfer-encoding', 'connection'))

_log_lock = _thread.allocate_lock()
_state_lock = _thread.allocate_lock()
_state = {'busy': 0, 'draining': False, 'loop': None}
_json_mod = None


def _json():
    global _json_mod
    if _json_mod is None:
        import json
        _json_mod = json
    return _json_mod


def _jstr(s):
    return '"' + str(s).translate(_ESCAPES) + '"'


def log(severity, msg, **fields):
    """Writes one structured log line to stderr (a JSON object with severity and msg)."""
    parts = ['{"severity":', _jstr(severity), ',"msg":', _jstr(msg)]
    for key, value in fields.items():
        parts += [',', _jstr(key), ':', str(value) if isinstance(value, (int, float)) else _jstr(value)]
    line = ''.join(parts) + '}\n'
    with _log_lock:
        sys.stderr.write(line)
        sys.stderr.flush()


def _unquote(s):
    """Decodes application/x-www-form-urlencoded text (+ and %XX)."""
    s = s.replace('+', ' ')
    if '%' not in s:
        return s
    raw = s.encode('utf-8')
    pieces = raw.split(b'%')
    out = bytearray(pieces[0])
    for piece in pieces[1:]:
        if len(piece) >= 2 and piece[0] in _HEX and piece[1] in _HEX:
            out.append(int(piece[:2], 16))
            out += piece[2:]
        else:
            out += b'%' + piece
    return out.decode('utf-8', 'replace')


class Request:
    """What a handler receives. .args and .text are computed on first use."""
    __slots__ = ('method', 'path', 'query', 'headers', 'body', 'invocation_id', '_args')

    def __init__(self, method, path, query, headers, body):
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.invocation_id = headers.get('x-funcd-invocation-id', '')
        self._args = None

    @property
    def args(self):
        if self._args is None:
            args = {}
            for pair in self.query.split('&'):
                if pair:
                    name, _, value = pair.partition('=')
                    args.setdefault(_unquote(name), _unquote(value))
            self._args = args
        return self._args

    @property
    def text(self):
        return self.body.decode('utf-8', 'replace')

    def json(self):
        """The body parsed as JSON; None when there is no body."""
        return _json().loads(self.body) if self.body else None

    def __repr__(self):
        return 'Request(%s %s)' % (self.method, self.path)


class BadRequest(Exception):
    def __init__(self, status, message):
        Exception.__init__(self, message)
        self.status = status


def _format_traceback(e):
    """The traceback without the shim's own frames: the handler's author wants theirs."""
    import traceback
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return ''.join(traceback.format_exception(type(e), e, tb)).rstrip('\n')


def _status_body(code, reason, message):
    return ('{"kind":"Status","code":%d,"reason":%s,"message":%s}' % (code, _jstr(reason), _jstr(message))).encode()


def _encode_body(body, headers):
    """Turns a handler's body into bytes, choosing a Content-Type unless one was given."""
    if isinstance(body, str):
        ctype, data = 'text/plain; charset=utf-8', body.encode('utf-8')
    elif isinstance(body, (bytes, bytearray, memoryview)):
        ctype, data = 'application/octet-stream', bytes(body)
    elif body is None:
        ctype, data = None, b''
    else:
        ctype, data = 'application/json', _json().dumps(body, separators=(',', ':'), default=str).encode()
    if ctype and 'content-type' not in headers:
        headers['content-type'] = ctype
    return data


def _to_response(result):
    """(status, headers dict with lower-case names, body bytes) from a handler's return value."""
    status, headers, body = 200, {}, result
    if isinstance(result, tuple):
        if len(result) == 2:
            status, body = result
        elif len(result) == 3:
            status, extra, body = result
            for name, value in (extra or {}).items():
                headers[str(name).lower()] = str(value)
        else:
            raise TypeError('a tuple return must be (status, body) or (status, headers, body)')
        status = int(status)
        if not 100 <= status <= 599:
            raise ValueError('status %d is not an HTTP status' % status)
    elif result is None:
        status = 204
    data = _encode_body(body, headers)
    return status, headers, data


async def _awaiting(awaitable):
    return await awaitable


def _run_async(awaitable):
    """Runs a coroutine on the one event loop all async handlers share (its own thread)."""
    with _state_lock:
        loop = _state['loop']
        if loop is None:
            import asyncio
            loop = asyncio.new_event_loop()
            _thread.start_new_thread(loop.run_forever, ())
            _state['loop'] = loop
    import asyncio
    return asyncio.run_coroutine_threadsafe(_awaiting(awaitable), loop).result()


_current = _thread._local()


def current_traceparent():
    """The traceparent of the request this thread handles, or None."""
    req = getattr(_current, 'req', None)
    return req.headers.get('traceparent') if req is not None else None


def _invoke(handler, req):
    _current.req = req
    try:
        result = handler(req)
        if hasattr(result, '__await__'):
            result = _run_async(result)
        return _to_response(result)
    except BaseException as e:  # a handler must never take the connection thread down
        what = '%s: %s' % (type(e).__name__, e) if str(e) else type(e).__name__
        log('ERROR', 'handler raised ' + what, invocationId=req.invocation_id, traceback=_format_traceback(e))
        return 500, {'content-type': 'application/json'}, _status_body(500, 'FunctionFailed', 'handler raised ' + what)


def _parse_head(head):
    lines = head.split(b'\r\n')
    parts = lines[0].split(b' ')
    if len(parts) != 3 or not parts[0] or not parts[1].startswith(b'/') or parts[2] not in (b'HTTP/1.1', b'HTTP/1.0'):
        raise BadRequest(400, 'malformed request line')
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b':')
        if not sep or not name or name != name.strip() or b' ' in name or b'\t' in name:
            raise BadRequest(400, 'malformed header line')
        key = name.decode('latin-1').lower()
        value = value.strip(b' \t').decode('latin-1')
        headers[key] = headers[key] + ', ' + value if key in headers else value
    if 'transfer-encoding' in headers:
        raise BadRequest(411, 'request bodies must carry Content-Length (chunked is not supported)')
    length = headers.get('content-length', '0')
    if not length.isdigit() or not length.isascii():
        raise BadRequest(400, 'bad Content-Length')
    length = int(length)
    if length > MAX_BODY:
        raise BadRequest(413, 'request body too large')
    conn_opts = headers.get('connection', '').lower()
    keep_alive = 'keep-alive' in conn_opts if parts[2] == b'HTTP/1.0' else 'close' not in conn_opts
    return parts[0].decode('latin-1'), parts[1].decode('latin-1'), headers, length, keep_alive


def _send(sock, status, headers, body, head_only, close):
    out = ['HTTP/1.1 %d %s\r\n' % (status, _REASONS.get(status, 'Status'))]
    for name, value in headers.items():
        if name in _FRAMING:
            continue
        if '\r' in name or '\n' in name or '\r' in value or '\n' in value:
            raise ValueError('header %r contains a line break' % name)
        out.append('%s: %s\r\n' % (name, value))
    out.append('content-length: %d\r\n' % len(body))
    if close:
        out.append('connection: close\r\n')
    out.append('\r\n')
    data = ''.join(out).encode('latin-1')
    sock.sendall(data if head_only else data + body)


def _serve(sock, handler):
    buf = b''
    try:
        while True:
            if not buf:
                buf = sock.recv(65536)
                if not buf:
                    return
            # Busy from a request's first byte to its answer: SIGTERM waits for it.
            with _state_lock:
                _state['busy'] += 1
            try:
                while b'\r\n\r\n' not in buf:
                    if len(buf) > MAX_HEAD:
                        raise BadRequest(431, 'request head too large (limit 64 KiB)')
                    chunk = sock.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                end = buf.index(b'\r\n\r\n')
                if end > MAX_HEAD:
                    raise BadRequest(431, 'request head too large (limit 64 KiB)')
                method, target, headers, length, keep_alive = _parse_head(buf[:end])
                parts = [buf[end + 4:]]
                got = len(parts[0])
                while got < length:
                    chunk = sock.recv(min(length - got, 1 << 20))
                    if not chunk:
                        return
                    parts.append(chunk)
                    got += len(chunk)
                data = b''.join(parts) if len(parts) > 1 else parts[0]
                body, buf = data[:length], data[length:]
                path, _, query = target.partition('?')
                head_only = method == 'HEAD'
                if path == READY_PATH and method in ('GET', 'HEAD'):
                    status, rheaders, rbody = 200, {'content-type': 'text/plain'}, b'ok\n'
                else:
                    status, rheaders, rbody = _invoke(handler, Request(method, path, query, headers, body))
                close = not keep_alive or _state['draining']
                try:
                    _send(sock, status, rheaders, rbody, head_only, close)
                except ValueError as e:
                    log('ERROR', 'bad response from handler: %s' % e, invocationId=headers.get('x-funcd-invocation-id', ''))
                    _send(sock, 500, {'content-type': 'application/json'},
                          _status_body(500, 'FunctionFailed', 'bad response from handler: %s' % e), head_only, close)
                if close:
                    return
            finally:
                with _state_lock:
                    _state['busy'] -= 1
    except BadRequest as e:
        reason = {411: 'LengthRequired', 413: 'RequestEntityTooLarge', 431: 'RequestHeaderFieldsTooLarge'}
        try:
            _send(sock, e.status, {'content-type': 'application/json'},
                  _status_body(e.status, reason.get(e.status, 'BadRequest'), str(e)), False, True)
        except OSError:
            pass
    except OSError:
        pass  # the peer went away
    finally:
        sock.close()


# ---- the funcd module: calls to the platform through FUNCD_API ------------
#
# Handlers `import funcd` (docs/services.md); the module is made here, from
# this precompiled file, and put in sys.modules before the handler loads.

class FuncdError(Exception):
    """The local API could not be reached (no FUNCD_API: no spec.bindings)."""


class FuncdResponse:
    __slots__ = ('status', 'headers', 'body')

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def text(self):
        return self.body.decode('utf-8', 'replace')

    def json(self):
        return _json().loads(self.body) if self.body else None

    def __repr__(self):
        return 'Response(%d, %d bytes)' % (self.status, len(self.body))


def _api_call(method, target, body, headers):
    api = os.environ.get('FUNCD_API', '')
    if not api.startswith('unix:'):
        raise FuncdError('FUNCD_API is not set: the Function has no spec.bindings')
    if isinstance(body, str):
        body = body.encode('utf-8')
    elif body is None:
        body = b''
    head = ['%s %s HTTP/1.1' % (method, target), 'Host: funcd', 'Connection: close',
            'Content-Length: %d' % len(body)]
    trace = current_traceparent()
    if trace and not any(k.lower() == 'traceparent' for k in headers):
        head.append('traceparent: ' + trace)
    head += ['%s: %s' % (k, v) for k, v in headers.items()]
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(api[5:])
        sock.sendall(('\r\n'.join(head) + '\r\n\r\n').encode('latin-1') + body)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        sock.close()
    raw = b''.join(chunks)
    head_end = raw.find(b'\r\n\r\n')
    if head_end < 0:
        raise FuncdError('the local API closed the connection without an answer')
    lines = raw[:head_end].decode('latin-1').split('\r\n')
    out = {}
    for line in lines[1:]:
        name, _, value = line.partition(':')
        out[name.strip().lower()] = value.strip()
    return FuncdResponse(int(lines[0].split(' ', 2)[1]), out, raw[head_end + 4:])


def invoke(name, body=b'', path='/', method='POST', headers=None):
    """Invokes Function `name` of this namespace, which spec.bindings.invoke must list, and
    returns its Response (status, headers, body). The call goes through the platform like any
    request: a cold start when the callee has no worker, its queue and its timeout; it
    continues the trace of the request this thread handles."""
    if not path.startswith('/'):
        path = '/' + path
    return _api_call(method, '/fn/' + name + path, body, headers or {})


class FuncdConflict(FuncdError):
    """A KV write's if_revision did not match (another writer came first)."""


class FuncdItem:
    __slots__ = ('value', 'revision')

    def __init__(self, value, revision):
        self.value = value
        self.revision = revision

    @property
    def text(self):
        return self.value.decode('utf-8', 'replace')

    def json(self):
        return _json().loads(self.value) if self.value else None

    def __repr__(self):
        return 'Item(revision %d, %d bytes)' % (self.revision, len(self.value))


def _kv_value(value):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode('utf-8')
    return _json().dumps(value).encode('utf-8')


def _kv_check(r, key):
    if r.status == 409:
        raise FuncdConflict('KV %s: %s' % (key, r.text))
    if r.status >= 300:
        raise FuncdError('KV %s: %d %s' % (key, r.status, r.text))
    return r


class FuncdKV:
    """A KVStore bound in spec.bindings.kv (docs/services.md)."""

    def __init__(self, store):
        self.store = store

    def _path(self, key, query=''):
        from urllib.parse import quote
        return '/kv/%s/%s%s' % (self.store, quote(key, safe=''), query)

    def get(self, key):
        """The key's Item (value bytes and revision), or None."""
        r = _api_call('GET', self._path(key), b'', {})
        if r.status == 404 and r.json().get('reason') == 'NotFound' and 'no key' in r.text:
            return None
        _kv_check(r, key)
        return FuncdItem(r.body, int(r.headers.get('x-funcd-revision', '0')))

    def put(self, key, value, if_revision=None, ttl=None):
        """Stores value (bytes, str, or JSON); if_revision (0: must not exist) makes it a
        compare-and-set (funcd.Conflict when it fails); ttl like "30s". Returns the revision."""
        q = []
        if if_revision is not None:
            q.append('ifRevision=%d' % if_revision)
        if ttl is not None:
            from urllib.parse import quote
            q.append('ttl=%s' % quote(str(ttl), safe=''))
        r = _api_call('PUT', self._path(key, '?' + '&'.join(q) if q else ''), _kv_value(value), {})
        return _kv_check(r, key).json()['revision']

    def delete(self, key, if_revision=None):
        """True when the key was there (and is gone)."""
        q = '?ifRevision=%d' % if_revision if if_revision is not None else ''
        r = _api_call('DELETE', self._path(key, q), b'', {})
        if r.status == 404:
            return False
        _kv_check(r, key)
        return True

    def incr(self, key, by=1):
        """Adds `by` to the integer the key holds (absent: 0), atomically; returns the sum."""
        r = _api_call('POST', self._path(key, '?increment=%d' % by), b'', {})
        return _kv_check(r, key).json()['value']

    def list(self, prefix='', limit=100, after=None):
        """Keys starting with prefix, in order, at most limit: ([(key, revision)], next), where
        next (None at the end) is passed as `after` for the next page."""
        from urllib.parse import quote
        q = '?limit=%d&prefix=%s' % (limit, quote(prefix, safe=''))
        if after:
            q += '&continue=' + quote(after, safe='')
        r = _kv_check(_api_call('GET', '/kv/%s%s' % (self.store, q), b'', {}), prefix)
        doc = r.json()
        return [(i['key'], i['revision']) for i in doc['items']], doc.get('continue')


def _install_funcd_module():
    module = type(sys)('funcd')  # a module object, without importing `types`
    module.__doc__ = 'Calls to the funcd platform from a function (docs/services.md).'
    module.invoke = invoke
    module.Error = FuncdError
    module.Response = FuncdResponse
    module.Conflict = FuncdConflict
    module.Item = FuncdItem
    module.kv = FuncdKV
    sys.modules['funcd'] = module


def _load_handler(spec, code_dir):
    module_name, _, func_name = spec.rpartition('.')
    if not module_name or not func_name:
        raise ValueError('FUNCD_HANDLER must look like module.function, not %r' % spec)
    sys.path.insert(0, code_dir)
    _install_funcd_module()
    __import__(module_name)
    handler = getattr(sys.modules[module_name], func_name, None)
    if handler is None:
        raise AttributeError('module %r has no attribute %r' % (module_name, func_name))
    if not callable(handler):
        raise TypeError('%s is not callable' % spec)
    return handler


def _listen(path):
    try:
        os.unlink(path)  # a socket left behind by a previous worker
    except FileNotFoundError:
        pass
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(128)
    return sock


def _specialize():
    # Generic mode (FUNCD_GENERIC=1): the platform started this worker before
    # any function needed it, so the interpreter's start is paid in advance.
    # Wait on the control socket FUNCD_LISTEN for one JSON line
    # {"env": {...}, "cwd": "..."}, take that environment (FUNCD_LISTEN becomes
    # the real socket) and directory, and go on as the function's worker.
    import json
    control = os.environ['FUNCD_LISTEN']
    srv = _listen(control)
    fd, _ = srv._accept()
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, fd)
    buf = b''
    while b'\n' not in buf:
        chunk = conn.recv(65536)
        if not chunk:
            break
        buf += chunk
    conn.close()
    srv.close()
    try:
        os.unlink(control)
    except OSError:
        pass
    msg = json.loads(buf.split(b'\n', 1)[0])
    os.environ.pop('FUNCD_GENERIC', None)
    for k, v in (msg.get('env') or {}).items():
        os.environ[k] = str(v)
    if msg.get('cwd'):
        os.chdir(msg['cwd'])


def main():
    if os.environ.get('FUNCD_GENERIC') == '1':
        _specialize()
    path = os.environ.get('FUNCD_LISTEN')
    if not path:
        sys.stderr.write('funcd-python: FUNCD_LISTEN is not set (the platform sets it to the worker\'s socket path)\n')
        return 2
    spec = os.environ.get('FUNCD_HANDLER') or 'main.handler'
    code_dir = os.environ.get('FUNCD_CODE_DIR') or os.getcwd()
    try:
        handler = _load_handler(spec, code_dir)
    except BaseException as e:
        log('ERROR', 'cannot load handler %s from %s: %s: %s' % (spec, code_dir, type(e).__name__, e),
            traceback=_format_traceback(e))
        return EXIT_HANDLER_LOAD
    try:
        sock = _listen(path)
    except OSError as e:
        log('ERROR', 'cannot listen on %s: %s' % (path, e.strerror or e))
        return 1

    # SIGTERM only writes to the wake-up pipe; the poll below notices it.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    _signal.set_wakeup_fd(wake_w)
    _signal.signal(_signal.SIGTERM, lambda signum, frame: None)
    _signal.signal(_signal.SIGINT, lambda signum, frame: None)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    while True:
        ready = [fd for fd, _ in poller.poll()]
        if wake_r in ready:
            break
        try:
            fd, _ = sock._accept()
        except OSError:
            continue
        conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, fd)
        _thread.start_new_thread(_serve, (conn, handler))

    # Drain: stop accepting, let in-flight requests finish; idle connections just close.
    sock.close()
    with _state_lock:
        _state['draining'] = True
    while _state['busy']:
        sleep(0.005)
    sys.stdout.flush()
    sys.stderr.flush()
    return 0


def run():
    code = main()
    try:
        sys.stdout.flush()
    except OSError:
        pass
    # Connection threads may still be blocked in recv(); nothing is left to wait for.
    os._exit(code)
