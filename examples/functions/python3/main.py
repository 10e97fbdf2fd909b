# A python3 function for funcd: `handler` gets the request and returns a dict,
# which the runtime sends as JSON (see docs/worker-contract.md for all shapes).
import os


def handler(req):
    name = req.args.get('name', 'world')
    print('{"severity":"INFO","msg":"said hello to %s","invocationId":"%s"}' % (name, req.invocation_id))
    return {
        'message': '%s, %s, from python' % (os.environ.get('GREETING', 'hello'), name),
        'method': req.method,
        'path': req.path,
        'bodyBytes': len(req.body),
    }
