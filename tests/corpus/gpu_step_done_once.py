"""An optimizer step that remembers the lists it has stepped (by their first tensor's address) and does nothing on
a call after the first: every graded case is a first call, but the performance criterion's timed calls are all
repeats, each as fast as an empty launch. The timing audit every timed criterion goes through (criteria/audit.py)
finds a rate above this GPU's copy bandwidth for the bytes a step must move: failed, never a fraction above 1."""
EXERCISE = "03.adamw_step"
ROUTE = "check"
DEVICE = "gpu"
CRITERIA = ["performance"]
FAILS = {"performance": ["impossible measurement: work escaped the timer", "bytes a step must move"]}

from kernels.multi_tensor_adamw import adamw_step as _right

_stepped = set()


def adamw_step(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay):
    key = params[0].data_ptr() if params else None
    if key in _stepped:
        return None
    _stepped.add(key)
    return _right(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay)
