-- Promote every trial of this rollout without assessing it: spec.strategy.progressive.forcePromote = true.
if obj.spec.strategy == nil then
  obj.spec.strategy = {}
end
if obj.spec.strategy.progressive == nil then
  obj.spec.strategy.progressive = {}
end
obj.spec.strategy.progressive.forcePromote = true
return obj
