# A function that tries to leave its sandbox: it reads a file outside its
# view, calls the control plane on loopback, and forks many children.
import os
import socket


def attempt(what, fn):
    try:
        return '%s: ALLOWED (%s)' % (what, fn())
    except Exception as e:  # the sandbox answers with an error
        return '%s: refused (%s)' % (what, e.__class__.__name__)


def read_secret():
    with open(os.environ['SECRET_FILE']) as f:
        return f.read(20)


def call_control_plane():
    host, port = os.environ['CONTROL_PLANE'].rsplit(':', 1)
    socket.create_connection((host, int(port)), timeout=1).close()
    return 'connected'


def fork_many():
    # Children stay alive until the parent is done: a fork bomb's shape.
    r, w = os.pipe()
    pids = []
    try:
        for _ in range(1100):
            pid = os.fork()
            if pid == 0:
                os.close(w)
                os.read(r, 1)
                os._exit(0)
            pids.append(pid)
    finally:
        os.close(w)
        os.close(r)
        for pid in pids:
            os.waitpid(pid, 0)
    return '%d children at once' % len(pids)


def handler(req):
    lines = [attempt('read a host file', read_secret),
             attempt('connect to the control plane', call_control_plane),
             attempt('fork 1100 processes (default pids limit: 1024)', fork_many),
             # uid 0 inside is the user namespace's root: nobody on the host, no capabilities
             'pid inside: %d, uid inside: %d' % (os.getpid(), os.getuid())]
    return 200, {'Content-Type': 'text/plain'}, '\n'.join(lines) + '\n'
