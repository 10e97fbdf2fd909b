# checkout: a python3 function that asks the `hello-native` function (the native example,
# examples/functions/native) before it answers: a function-to-function call through the
# local API (docs/services.md). The Function lists hello-native in spec.bindings.invoke.
import funcd


def handler(req):
    r = funcd.invoke('hello-native', req.body, path='/from-checkout?name=checkout')
    return {'asked': 'hello-native', 'status': r.status, 'answer': r.text.strip()}
