"""One measurement: a repetition's session (`session.Session`: preflight, the host knobs
through the journal, a fresh server, the load, telemetry), the evaluator that turns
repetitions into a value the optimizer can trust (`evaluator`), preflight's checks
(`preflight`) and the host's noise facts at the noise floor (`host_noise`)."""
