"""pipelines: the DFlash training programs built on ``dflash`` (the ``dflash-train`` command).

* :mod:`pipelines.sync_trainer`: the lock-step trainer (``dflash-train sync``);
* :mod:`pipelines.async_pipeline`: the CSP pipeline (``dflash-train pipeline``) on the
  :mod:`pipelines.csp` runtime (stages in threads, bounded channels, first-failure cancellation);
* what both run: :mod:`~pipelines.train_step` (one optimizer step) and
  :mod:`~pipelines.train_loop` (the step loop: records, eval, checkpoints, how the launch ends);
* :mod:`pipelines.evaluate`: real acceptance length of a checkpoint (``dflash-train eval``),
  reported by :mod:`pipelines.eval_report` (interval over prompts, benchmarks, text or JSON);
* shared pieces: :mod:`~pipelines.config` (typed TOML configs), :mod:`~pipelines.schedule`,
  :mod:`~pipelines.run_setup` (target, data, drafter, optimizer and loader, built or resumed
  before the first step), :mod:`~pipelines.resume` (the schedule and batch layout across a
  resume), :mod:`~pipelines.update` (the update rule), :mod:`~pipelines.runlog` (the run's log,
  checkpoints and non-finite guard), :mod:`~pipelines.outcome` (how a launch ends: summary, exit
  code), :mod:`~pipelines.devices` (device checks, mixed precision), :mod:`~pipelines.progress`
  (progress bar or lines, closing summary), :mod:`~pipelines.distributed` (torchrun data
  parallelism), :mod:`~pipelines.log_records` and :mod:`~pipelines.logwriter` (JSONL schema v1);
* assets and their recipes: ``make_target`` (the bundled tiny target), ``make_data`` (its
  regenerated training data), ``real_sample_log`` (``sample_logs/train.jsonl`` from real runs).

See docs/pipelines.md.
"""
