"""gpu_check's first step: the versions, the device, and a MuJoCo step; exits non-zero where DEVICE is cuda and
torch sees none.

python benchmarks/gpu_check/versions.py DEVICE OUT_JSON (run by benchmarks/gpu_check.sh). It imports nothing of this
project (its JSON is written with json.dump, not plumbing's write_json): it reports a broken install, not fails on it."""

import importlib, json, platform, subprocess, sys
import torch

device, path = sys.argv[1:]
v = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
for name in ("numpy", "gymnasium", "mujoco", "tyro", "h5py", "tqdm", "tensorboard"):
    v[name] = getattr(importlib.import_module(name), "__version__", "?")
import gymnasium as gym

env = gym.make("Hopper-v4")  # MuJoCo works
env.reset(seed=0)
env.step(env.action_space.sample())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    v |= {"device": p.name, "capability": f"{p.major}.{p.minor}", "memory_gib": round(p.total_memory / 2**30, 1)}
    v |= {"multiprocessors": p.multi_processor_count, "bf16": torch.cuda.is_bf16_supported()}
    v["cudnn"] = torch.backends.cudnn.version()
    try:
        smi = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        v["driver"] = subprocess.run(smi, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        v["driver"] = f"unknown ({e})"
else:
    v["device"] = platform.processor() or platform.machine()
print(json.dumps(v, indent=1))
with open(path, "w") as f:
    json.dump(v, f)
if device == "cuda" and not torch.cuda.is_available():
    sys.exit("error: torch sees no CUDA device; every later step would run on the CPU (run with --rehearse for that)")
