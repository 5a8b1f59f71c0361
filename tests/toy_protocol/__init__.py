"""A sixth protocol made for the tests: one package (spec, scorer, options, evaluate, report view) that
`registry.register` adds to sdscore with one entry; nothing else in sdscore names it."""


def scoring_job(**settings):
    from toy_protocol.scorer import scoring_job as job

    return job(**settings)


def evaluate_files(results, out_json, *, plot=None, seed: int = 0):
    from toy_protocol.evaluate import evaluate_files as evaluate

    return evaluate(results, out_json, plot=plot, seed=seed)
