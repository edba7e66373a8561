# TEMPORARY helper script (to be deleted): checks all task/solution pairs at GPU sizes.
import glob, importlib.util, os, sys, time, types, traceback
import torch, triton
from triton.testing import do_bench
print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name(), flush=True)

def load(path, name, src=None):
    if src is None:
        spec = importlib.util.spec_from_file_location(name, path)
        m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m
    m = types.ModuleType(name); m.__file__ = path + ".variant.py"
    code = compile(src, m.__file__, "exec"); sys.modules[name] = m
    import linecache; linecache.cache[m.__file__] = (len(src), None, src.splitlines(True), m.__file__)
    exec(code, m.__dict__); return m

def cuda(xs): return [x.cuda() if torch.is_tensor(x) else x for x in xs]
def rel_err(o, r):
    tol = TOL[r.dtype]; o, r = o.double(), r.double(); s = r.abs().max().item()
    return (o - r).abs().max().item() / s, ((o - r).abs() <= tol * (s + r.abs())).all().item()
TOL = {torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 2e-2}

def check(rel, variant=None):
    task = load(f"tasks/{rel}", "t_" + rel.replace("/", "_")[:-3])
    spath = f"solutions/{rel}"
    src = open(spath).read()
    if variant: src = src.replace("acc = tl.dot(a, b, acc)", f"acc = tl.dot(a, b, acc, input_precision={variant!r})")
    sol = load(spath, "s_" + rel.replace("/", "_")[:-3] + (variant or ""), src)
    init = task.get_init_inputs()
    torch.manual_seed(0); ref_m = task.Model(*init).cuda()
    torch.manual_seed(0); new_m = sol.ModelNew(*init).cuda()
    worst, allok = 0.0, True
    with torch.no_grad():
        for seed in (0, 1):
            torch.manual_seed(seed); cases = [task.get_inputs()]
            torch.manual_seed(seed); cases += task.get_test_inputs()
            for i, inp in enumerate(cases):
                inp = cuda(inp); saved = [x.clone() for x in inp]
                r = ref_m(*inp); o = new_m(*inp); torch.cuda.synchronize()
                assert o.shape == r.shape and o.dtype == r.dtype, (o.shape, r.shape, o.dtype, r.dtype)
                assert all(torch.equal(a, b) for a, b in zip(inp, saved)), "input modified"
                e, ok = rel_err(o, r); worst = max(worst, e); allok &= ok
                if not ok: print(f"   MISMATCH {rel} seed{seed} case{i} rel={e:.2e}", flush=True)
                del r, o, inp, saved
        torch.manual_seed(0); inp = cuda(task.get_inputs())
        t_ref = do_bench(lambda: ref_m(*inp), warmup=25, rep=200, return_mode="median")
        t_new = do_bench(lambda: new_m(*inp), warmup=25, rep=200, return_mode="median")
    print(f"{'OK ' if allok else 'BAD'} {rel:42s} {variant or '':7s} worst_rel={worst:.2e} "
          f"ref={t_ref*1e3:9.1f}us triton={t_new*1e3:9.1f}us speedup={t_ref/t_new:5.2f}x", flush=True)
    del ref_m, new_m; torch.cuda.empty_cache()

rels = sorted(os.path.relpath(p, "tasks") for p in glob.glob("tasks/level*/*.py"))
jobs = [(r, None) for r in rels] + [("level3/01_mlp.py", "tf32x3"), ("level3/02_prenorm_ffn_block.py", "tf32x3")]
for r, v in jobs:
    t = time.time()
    try: check(r, v)
    except Exception: print("ERR", r, v); traceback.print_exc()
    print(f"    ({time.time()-t:.1f}s)", flush=True)
