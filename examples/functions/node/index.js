'use strict';
// A node function for funcd: `handler` gets the request and returns an object,
// which the runtime sends as JSON (see docs/worker-contract.md for all shapes).
exports.handler = async (req) => {
    const name = req.args.name || 'world';
    console.log(JSON.stringify({ severity: 'INFO', msg: `said hello to ${name}`, invocationId: req.invocationId }));
    return {
        message: `${process.env.GREETING || 'hello'}, ${name}, from node`,
        method: req.method,
        path: req.path,
        bodyBytes: req.body.length,
    };
};
