-- UTC calendar periods, shared by the pool scripts (prelude.lua) and budget.lua: each of
-- those runs as this file followed by its own text.

local DAY_MS = 86400000

-- Days since 1970-01-01 <-> proleptic Gregorian (year, month, day), the integer algorithms
-- of H. Hinnant's "chrono-compatible low-level date algorithms" (model.rs uses chrono).
local function civil_from_days(z)
  z = z + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m
end

local function days_from_civil(y, m)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = m > 2 and m - 3 or m + 9
  local doy = math.floor((153 * mp + 2) / 5)
  return era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
end

-- The UTC calendar period containing now: start and end ms (QuotaPeriod::window in Rust).
local function quota_window(per, now)
  local day = math.floor(now / DAY_MS)
  if per ~= 'month' then return day * DAY_MS, (day + 1) * DAY_MS end
  local y, m = civil_from_days(day)
  local ny, nm = y, m + 1
  if nm > 12 then ny, nm = y + 1, 1 end
  return days_from_civil(y, m) * DAY_MS, days_from_civil(ny, nm) * DAY_MS
end
