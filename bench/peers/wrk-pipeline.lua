-- Pipelining for wrk: every write carries `depth` identical GET requests
-- (first script argument, `wrk ... -- 16`; default 16). wrk parses the batch
-- once at start, counts the requests in it, and sends the next batch on a
-- connection only after all of the previous batch's responses arrived; every
-- response counts as one request in its totals and latency histogram.
local depth = 16

init = function(args)
   depth = tonumber(args[1]) or depth
   local batch = {}
   for i = 1, depth do
      batch[i] = wrk.format()
   end
   req = table.concat(batch)
end

request = function()
   return req
end
