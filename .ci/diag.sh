c++ --version | head -1
export PYTHONPATH=. MYOPS_CACHE_DIR=/tmp/myops-cache
python -m torch_ops_jit build 2>&1 | tail -2
for c in "ops.add(i,i)" "ops.add(f,f[:2])" "ops.sum(f,[5])" "ops.relu(i)" "torch.ops.myops.relu(i)" "ops.add(f.cuda(),f)" "ops.add(f.cuda(),f.cuda().half())"; do
python -c "
import torch, ops
i=torch.ones(3,dtype=torch.int32); f=torch.ones(3,4)
try:
  $c; print('NO ERROR $c')
except RuntimeError as e: print('OK $c:', str(e).splitlines()[0][:100])
" 2>&1 | tail -2
done
