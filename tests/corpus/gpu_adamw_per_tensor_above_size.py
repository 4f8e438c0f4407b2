"""One launch for every tensor once the lists hold more than 4M elements (more than any graded case, fewer than
the benchmark's model-sized lists), one launch in all below. On a GPU fusion also counts a step on the lists the
performance criterion times: failed, naming the benchmark's lists. The interpreter cannot step through lists
that large in reasonable time, so on the CPU the benchmark size is counted on GPU only."""
EXERCISE = "03.adamw_step"
ROUTE = "check"
DEVICE = "gpu"
CRITERIA = ["fusion"]
FAILS = {"fusion": ["the launch count grows with the size of the lists", "the benchmark's"]}

from kernels.multi_tensor_adamw import adamw_step as _one_launch
from kernels.multi_tensor_adamw import adamw_step_per_tensor as _per_tensor

LARGE = 1 << 22


def adamw_step(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay):
    step_fn = _per_tensor if sum(p.numel() for p in params) > LARGE else _one_launch
    return step_fn(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay)
