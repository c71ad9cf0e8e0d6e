-- Assess trials again: spec.strategy.progressive.forcePromote = false.
if obj.spec.strategy ~= nil and obj.spec.strategy.progressive ~= nil then
  obj.spec.strategy.progressive.forcePromote = false
end
return obj
