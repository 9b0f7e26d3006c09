"""SASS hashes of every Gluon kernel CI compiles (shipped + staged MXFP4 form). SRC: tree's src."""
import hashlib, json, multiprocessing, os, sys
os.environ["TRITON_INTERPRET"] = "0"
sys.path.insert(0, os.environ.get("SRC", "src"))
from concurrent.futures import ProcessPoolExecutor
from mixmla.kernels.gluon.compile import compile_decode, staged
from mixmla.kernels.gluon.launch import shipped_kernels, shipped_specs
from mixmla.kernels.gluon import sass

def facts(job):
    spec, staged_kernel = job
    k = compile_decode(spec, staged_kernel)
    text = "\n".join(t for _, t in sass._sass_instructions(k.asm["cubin"]))
    f = sass.kernel_facts(k)
    return (str(spec.constexprs()), staged(spec, staged_kernel), hashlib.sha256(text.encode()).hexdigest()[:12],
            f.registers, f.spill_bytes, f.loop_instructions)

if __name__ == "__main__":
    jobs = [(s, k) for s, k in shipped_kernels()] + [(s, True) for s in shipped_specs() if s.FORMAT == 2 and s.PAGED == 0]
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("fork")) as pool:
        for r in pool.map(facts, jobs):
            print(*r, flush=True)
