-- uroce's extensions to RoCEv2 in Wireshark and tshark (docs/wire-format.md): a post-dissector
-- that reads the BTH's Resv7 bits, which Wireshark's InfiniBand dissector shows only as "Reserved
-- (7 bits)", and says what they mean between two uroce ends:
--   bit 0  the sending QP speaks selective repeat (docs/selective-repeat.md);
--   bit 1  this RDMA WRITE ONLY may be placed ahead of a PSN gap;
--   bit 2  the sending QP takes ACK riders;
--   bit 3  an ACK rides on this request: its PSN and AETH are the 8 bytes before the ICRC, which
--          Wireshark otherwise shows as the end of the payload;
-- and a SACK: a PSN sequence error NAK from a QP that speaks selective repeat, whose AETH MSN
-- names the PSN the responder placed ahead of the hole (nothing when it is not after the hole).
-- Packets of peers that are not uroce (rxe, RNICs) carry none of it and get no uroce subtree.
--
--   tshark -X lua_script:uroce.lua -r capture.pcap -O uroce
--   tshark -X lua_script:uroce.lua -r capture.pcap -Y uroce.rider -T fields -e uroce.rider.psn
-- Wireshark: copy it into ~/.local/lib/wireshark/plugins/ (Lua plugins are loaded from there).

local uroce = Proto("uroce", "uroce RoCEv2 extensions")

local f_ext = ProtoField.uint8("uroce.ext", "Extension bits (BTH Resv7)", base.HEX, nil, 0x7f)
local f_sr = ProtoField.bool("uroce.sr", "Speaks selective repeat", 8, nil, 0x01)
local f_place = ProtoField.bool("uroce.place", "WRITE placeable ahead of a gap", 8, nil, 0x02)
local f_rides = ProtoField.bool("uroce.rides", "Takes ACK riders", 8, nil, 0x04)
local f_rider = ProtoField.bool("uroce.rider", "An ACK rides on this request", 8, nil, 0x08)
local f_rider_psn = ProtoField.uint24("uroce.rider.psn", "Rider: acknowledged PSN", base.DEC)
local f_rider_syn = ProtoField.uint8("uroce.rider.syndrome", "Rider: AETH syndrome", base.HEX)
local f_rider_msn = ProtoField.uint24("uroce.rider.msn", "Rider: AETH MSN", base.DEC)
local f_sack = ProtoField.bool("uroce.sack", "SACK", base.NONE)
local f_sack_hole = ProtoField.uint24("uroce.sack.hole", "SACK: first missing PSN", base.DEC)
local f_sack_psn = ProtoField.uint24("uroce.sack.psn", "SACK: PSN received ahead", base.DEC)
uroce.fields = {f_ext, f_sr, f_place, f_rides, f_rider, f_rider_psn, f_rider_syn, f_rider_msn,
                f_sack, f_sack_hole, f_sack_psn}

local ib_f = Field.new("infiniband")
local opcode_f = Field.new("infiniband.bth.opcode")
local psn_f = Field.new("infiniband.bth.psn")
local syndrome_f = Field.new("infiniband.aeth.syndrome")
local msn_f = Field.new("infiniband.aeth.msn")

local kIcrcBytes = 4
local kRiderBytes = 8

-- PSN b is after PSN a in the 24-bit space (within half of it).
local function psn_after(a, b)
  local d = (b - a) % 0x1000000
  return d ~= 0 and d < 0x800000
end

function uroce.dissector(tvb, pinfo, tree)
  local ib = ib_f()
  local opcode = opcode_f()
  if ib == nil or opcode == nil then return end
  -- The BTH starts the InfiniBand item (RoCEv2: the UDP payload); Resv7 is byte 8's low bits.
  local bth = ib.offset
  if ib.len < 12 + kIcrcBytes then return end
  local ext = tvb(bth + 8, 1):bitfield(1, 7)
  local op = opcode.value
  local is_sack = false
  local syndrome = syndrome_f()
  -- An RC or XRC ACKNOWLEDGE (0x11, 0xb1) with a PSN sequence error NAK from an SR QP.
  if (op == 0x11 or op == 0xb1) and syndrome ~= nil and syndrome.value == 0x60 and
      bit.band(ext, 0x01) ~= 0 then
    is_sack = true
  end
  if ext == 0 and not is_sack then return end
  local t = tree:add(uroce, tvb(bth + 8, 1))
  t:add(f_ext, tvb(bth + 8, 1))
  t:add(f_sr, tvb(bth + 8, 1))
  t:add(f_place, tvb(bth + 8, 1))
  t:add(f_rides, tvb(bth + 8, 1))
  t:add(f_rider, tvb(bth + 8, 1))
  local info = {}
  if bit.band(ext, 0x08) ~= 0 and ib.len >= 12 + kRiderBytes + kIcrcBytes then
    local r = tvb(bth + ib.len - kIcrcBytes - kRiderBytes, kRiderBytes)
    local rt = t:add(f_rider_psn, r(1, 3))
    rt:prepend_text("ACK rider: ")
    t:add(f_rider_syn, r(4, 1))
    t:add(f_rider_msn, r(5, 3))
    info[#info + 1] = string.format("ACK rider PSN %d", r(1, 3):uint())
  end
  if is_sack then
    local hole = psn_f().value
    local placed = msn_f()
    t:add(f_sack, tvb(bth, 1), true)
    t:add(f_sack_hole, tvb(bth + 9, 3))
    if placed ~= nil and psn_after(hole, placed.value) then
      t:add(f_sack_psn, tvb(bth + 13, 3))
      info[#info + 1] = string.format("SACK hole %d, received %d", hole, placed.value)
    else
      info[#info + 1] = string.format("SACK hole %d", hole)
    end
  end
  if #info > 0 then pinfo.cols.info:append(" [uroce: " .. table.concat(info, "; ") .. "]") end
end

register_postdissector(uroce)
