# Fails at import: the shim must refuse to start, saying why.
raise RuntimeError('broken on purpose')
