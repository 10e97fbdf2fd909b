// Fails at load: the shim must refuse to start, saying why.
throw new Error('broken on purpose');
