"""``kernelzoo db prune``: drop winners that are not current (stale, or a config no longer in the space) and the
studies of code that changed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import delete

from kernelzoo.db.models import TrialModel
from kernelzoo.db.records import delete_winners, winners
from kernelzoo.db.store import Store
from kernelzoo.registry import registry


@dataclass(frozen=True)
class Pruned:
    winners: int
    studies: int
    trials: int


def prune(store: Store, older_than_days: float | None = None) -> Pruned:
    """Delete the winners that are not current (`tune --stale` re-times stale ones: prune after it), the Optuna
    studies of changed code (and idle ones with ``older_than_days``) and their trial records; how many of each
    went."""
    import optuna

    from kernelzoo.db.studies import optuna_storage

    stale = [w.key for w in winners(store) if not registry.is_current(w.op, w.plugin, w.source_hash, w.config)]
    n_winners = store.transaction(lambda s: delete_winners(s, stale), write=True)
    storage = optuna_storage(store.url)
    cutoff = datetime.now(timezone.utc) - timedelta(days=older_than_days) if older_than_days is not None else None
    gone = []
    for summary in optuna.study.get_all_study_summaries(storage, include_best_trial=False):
        attrs = summary.user_attrs
        if not summary.study_name.startswith("kernelzoo:"):
            continue  # someone else's study in the same database
        old = False
        if cutoff is not None:
            trials = optuna.load_study(study_name=summary.study_name, storage=storage).get_trials(deepcopy=False)
            times = [t.datetime_complete or t.datetime_start for t in trials if t.datetime_start]
            last = max(times, default=summary.datetime_start)
            old = last is not None and last.replace(tzinfo=last.tzinfo or timezone.utc) < cutoff
        if old or not registry.is_current(attrs.get("op", ""), attrs.get("plugin", ""), attrs.get("source_hash", "")):
            optuna.delete_study(study_name=summary.study_name, storage=storage)
            gone.append(summary.study_name)
    n_trials = store.transaction(
        lambda s: s.execute(delete(TrialModel).where(TrialModel.study_name.in_(gone))).rowcount if gone else 0,
        write=True)
    return Pruned(n_winners, len(gone), n_trials)
