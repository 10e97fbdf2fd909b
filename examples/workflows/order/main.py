# The three functions of the order workflow (docs/workflows.md). Each takes
# the step's input as its JSON body and answers JSON; the engine sends
# X-Funcd-Idempotency-Key ({run}/{step}/{index}): a real side effect (a
# charge, a mail) would record it and skip a key it has seen.

PRICES = {'apple': 0.5, 'pear': 0.75, 'fig': 1.25}


def fetch_order(req):
    # A stand-in for a database read: the order's lines by id.
    order = req.json() or {}
    return {'id': order.get('id', ''),
            'lines': [{'sku': 'apple', 'qty': 4}, {'sku': 'fig', 'qty': 2}]}


def price(req):
    order = req.json()
    items = ['%d x %s' % (line['qty'], line['sku']) for line in order['lines']]
    total = sum(PRICES[line['sku']] * line['qty'] for line in order['lines'])
    return {'id': order['id'], 'items': items, 'total': total}


def notify(req):
    # One call per item (forEach): what would be sent.
    return {'sent': 'shipped: %s' % req.json(),
            'key': req.headers.get('x-funcd-idempotency-key', '')}
