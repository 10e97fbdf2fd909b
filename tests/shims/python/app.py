# Handlers the shim test drives; `handler` dispatches on the path so one worker
# covers every return shape.
import time


def echo(req):
    return {
        'method': req.method, 'path': req.path, 'query': req.query, 'args': req.args,
        'headers': req.headers, 'text': req.text, 'bodyLength': len(req.body),
        'json': req.json() if req.headers.get('content-type') == 'application/json' else None,
        'invocationId': req.invocation_id,
    }


async def later(req):
    import asyncio
    await asyncio.sleep(0.01)
    return {'async': True, 'path': req.path}


ROUTES = {
    '/text': lambda req: 'hello text',
    '/bytes': lambda req: b'\x00\x01raw',
    '/list': lambda req: [1, 'two'],
    '/pair': lambda req: (202, 'accepted'),
    '/triple': lambda req: (201, {'X-Custom': 'yes', 'Content-Type': 'text/csv'}, 'a,b\n'),
    '/none': lambda req: None,
    '/slow': lambda req: time.sleep(float(req.args.get('s', '1'))) or 'slept',
    '/boom': lambda req: 1 / 0,
    '/badheader': lambda req: (200, {'X-Evil': 'a\r\nInjected: 1'}, 'x'),
    '/awaitable': later,
}


def handler(req):
    return ROUTES.get(req.path, echo)(req)


async def async_handler(req):
    return await later(req)
