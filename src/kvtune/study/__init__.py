"""The study: from the study file (`loader`) to a recommendation.

    kvtune tune FILE     -> run.StudyRun(loader.load_study(FILE)).run()
    kvtune sweep FILE    -> commands.sweep()
    kvtune run FILE      -> commands.run_config()

One unit per part: `loader` (the study file, the one way it becomes a study), `search`
(the loop), `noise` (the baseline's noise floor), `drift`, `confirm` (the interleaved
confirmation), `ablation`, `record` (trials told to and read from Optuna). Importing the
package imports none of them: the command line checks a study file before it loads the
search and statistics stack.
"""
