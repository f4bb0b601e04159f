"""`kvtune canary`: canary servers running a change against control servers on the current
configuration, serving the same class of live traffic, judged at every look with intervals
that stay valid however often they are looked at (docs/production.md, the last step).

    watch.py     what is read from each server (through its kind's reader) and the figures
                 of one interval, canary and control over the same interval
    verdict.py   goal and guardrails, the anytime-valid interval of each (kvtune.stats) and
                 the outcome: promote, roll back, keep watching, inconclusive
    session.py   the loop: verify, watch, decide, roll back through the export's own
                 rollback file (journalled), the record
    page.py      the HTML page of a session"""
