rule code_fingerprint:
    """The fingerprint of the code a job runs: one `sha256  path` line per file of it
    (src/code_inputs.py). It runs again when one of the files changes, and so do the jobs
    that take the fingerprint as their code input."""
    input:
        code_files,
    output:
        CODE,
    log:
        experiment_log("code_fingerprint-{name}"),
    wildcard_constraints:
        name=r"[A-Za-z][A-Za-z0-9_]*(-[A-Za-z][A-Za-z0-9_]*){0,2}",
    localrule: True
    run:
        listing = code_listing(input, root=REPO)
        write_fingerprint(RESULTS, output[0], listing, log=log[0])
