func.func @main(%arg0: !torch.vtensor<[2],f32>) -> !torch.vtensor<[2],f32> {
  %0 = torch.operator "aten.no_such_op"(%arg0) : (!torch.vtensor<[2],f32>) -> !torch.vtensor<[2],f32> loc("if2 model.py:7")
  return %0 : !torch.vtensor<[2],f32> loc("main")
}
