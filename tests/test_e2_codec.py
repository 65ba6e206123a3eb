"""The E2 codecs: E2SM-KPM round trips, conformance with the O-RAN reference modules both ways,
both colletStartTime sizes, E2AP PDUs against pycrate's E2AP tables, and fuzzed decoders."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import asn1tools
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from kpi_forecast.xapp.ric.e2 import e2ap, kpm
from kpi_forecast.xapp.ric.e2.kpm import (
    ActionDefinition,
    CellGlobalId,
    DecodeError,
    IndicationMessage,
    Measurement,
)
from kpi_forecast.xapp.ric.e2.kpm_indication import (
    decode_indication_header,
    decode_indication_message,
    encode_indication_header,
    encode_indication_message,
)

SHARED_ASN1 = Path(__file__).resolve().parents[2] / "shared/asn1"
KPM_ASN = SHARED_ASN1 / "e2sm-kpm-v4.00.asn"
COMMON_ASN = SHARED_ASN1 / "e2sm-v5.00.asn"
PROJECT_ASN = Path(kpm.__file__).with_name("kpm.asn")

START = datetime(2025, 3, 14, 9, 26, 53, 589_793, tzinfo=UTC)
NTP_UNIX_OFFSET = 2_208_988_800
PLMN = bytes.fromhex("00f110")  # MCC 001, MNC 01
NO_LABEL = [{"measLabel": {"noLabel": "true"}}]


def _reference_texts() -> tuple[str, str]:
    if not (KPM_ASN.exists() and COMMON_ASN.exists()):
        pytest.skip(f"reference E2SM ASN.1 modules absent from {SHARED_ASN1}")
    return KPM_ASN.read_text(), COMMON_ASN.read_text()


@pytest.fixture(scope="module")
def ref() -> asn1tools.compiler.Specification:
    """The O-RAN E2SM-KPM v4 and E2SM common modules, aligned PER."""
    _reference_texts()
    return asn1tools.compile_files([str(KPM_ASN), str(COMMON_ASN)], "per")


@pytest.fixture(scope="module")
def ref_v2() -> asn1tools.compiler.Specification:
    """The reference with KPM v2's 4-octet TimeStamp: what a KPM v2 node encodes with."""
    kpm_text, common_text = _reference_texts()
    v3_stamp = "TimeStamp ::= OCTET STRING (SIZE(8))"
    assert v3_stamp in kpm_text
    v2_text = kpm_text.replace(v3_stamp, "TimeStamp ::= OCTET STRING (SIZE(4))")
    return asn1tools.compile_string(f"{v2_text}\n{common_text}\n", "per")


def ntp_bytes(moment: datetime) -> bytes:
    """An independent NTP (RFC 5905) encoding of `moment`, for checking ours."""
    delta = moment - datetime(1900, 1, 1, tzinfo=UTC)
    seconds = delta.days * 86_400 + delta.seconds
    fraction = round(delta.microseconds * 2**32 / 1_000_000)
    return (seconds % 2**32).to_bytes(4, "big") + fraction.to_bytes(4, "big")


def ref_header(stamp: bytes, **optional: str) -> dict[str, Any]:
    return {
        "indicationHeader-formats": (
            "indicationHeader-Format1",
            {"colletStartTime": stamp, **optional},
        )
    }


def ref_message(format1: dict[str, Any]) -> dict[str, Any]:
    return {"indicationMessage-formats": ("indicationMessage-Format1", format1)}


def ref_meas_info(*names: str) -> list[dict[str, Any]]:
    return [{"measType": ("measName", n), "labelInfoList": NO_LABEL} for n in names]


def ref_action(format1: dict[str, Any], style: int = 1) -> dict[str, Any]:
    return {
        "ric-Style-Type": style,
        "actionDefinition-formats": ("actionDefinition-Format1", format1),
    }


# --- E2SM-KPM round trips -----------------------------------------------------------------------


@pytest.mark.parametrize("period_ms", [1, 1000, 2**32 - 1])
def test_event_trigger_round_trips(period_ms: int) -> None:
    assert kpm.decode_event_trigger(kpm.encode_event_trigger(period_ms)) == period_ms


@pytest.mark.parametrize("period_ms", [0, 2**32])
def test_event_trigger_outside_the_standard_range_is_refused(period_ms: int) -> None:
    with pytest.raises(ValueError, match="reportingPeriod"):
        kpm.encode_event_trigger(period_ms)


@pytest.mark.parametrize(
    "cell",
    [None, CellGlobalId(PLMN, nr_cell=2**36 - 1), CellGlobalId(PLMN, eutra_cell=0x1234567)],
    ids=["no-cell", "nr", "eutra"],
)
def test_action_definition_round_trips(cell: CellGlobalId | None) -> None:
    defn = ActionDefinition(list(kpm.MEASUREMENTS), granularity_ms=1000, cell=cell)
    assert kpm.decode_action_definition(kpm.encode_action_definition(defn)) == defn


@pytest.mark.parametrize(
    "defn",
    [
        ActionDefinition([], 1000),
        ActionDefinition(["RRU.PrbUsedDl"], 0),
        ActionDefinition(["DRB_UEThpDl"], 1000),  # "_" is not a PrintableString character
        ActionDefinition(["x" * 151], 1000),
    ],
    ids=["no-measurement", "zero-granularity", "not-printable", "name-too-long"],
)
def test_action_definition_the_standard_cannot_carry_is_refused(defn: ActionDefinition) -> None:
    with pytest.raises(ValueError):
        kpm.encode_action_definition(defn)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"plmn": b"\x00\xf1"},
        {"plmn": PLMN},
        {"plmn": PLMN, "nr_cell": 1, "eutra_cell": 1},
        {"plmn": PLMN, "nr_cell": 2**36},
        {"plmn": PLMN, "eutra_cell": 2**28},
    ],
)
def test_cell_id_checks_itself(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        CellGlobalId(**kwargs)


@pytest.mark.parametrize(
    "moment",
    [
        START,
        datetime(2036, 2, 7, 6, 28, 16, tzinfo=UTC),  # first second of NTP era 1
        datetime(2099, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(1999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-5))),
    ],
)
def test_indication_header_round_trips_to_the_microsecond(moment: datetime) -> None:
    decoded = decode_indication_header(encode_indication_header(moment))
    assert decoded == moment
    assert decoded.tzinfo is UTC


def test_indication_header_writes_the_ntp_timestamp() -> None:
    encoded = encode_indication_header(START)
    # 7 bits of extension and presence flags, then the 8 octets, octet-aligned
    assert encoded == b"\x00" + ntp_bytes(START)
    assert int.from_bytes(encoded[1:5], "big") == int(START.timestamp()) + NTP_UNIX_OFFSET


@pytest.mark.parametrize(
    "moment",
    [datetime(2025, 1, 1), datetime(1960, 1, 1, tzinfo=UTC), datetime(2110, 1, 1, tzinfo=UTC)],
    ids=["naive", "before-1968", "after-2104"],
)
def test_indication_header_refuses_times_it_cannot_place(moment: datetime) -> None:
    with pytest.raises(ValueError):
        encode_indication_header(moment)


def test_indication_message_round_trips_integer_real_and_missing_values() -> None:
    msg = IndicationMessage(
        [
            Measurement("RRU.PrbUsedDl", [12.0, None, 2**32 - 1]),
            Measurement("DRB.UEThpDl", [1234.5, 0.0, -3.0]),
            Measurement("RRC.ConnMean", [2.0**32, 7.0, float("inf")]),
        ],
        granularity_ms=1000,
    )
    assert decode_indication_message(encode_indication_message(msg)) == msg


def test_indication_message_keeps_nan_as_a_real_value() -> None:
    msg = IndicationMessage([Measurement("DRB.UEThpUl", [float("nan")])])
    (value,) = (
        decode_indication_message(encode_indication_message(msg)).measurements[0].values
    )
    assert value is not None and math.isnan(value)


@pytest.mark.parametrize(
    "measurements",
    [[], [Measurement("RRU.PrbUsedDl", [1.0]), Measurement("RRU.PrbUsedUl", [1.0, 2.0])]],
    ids=["none", "ragged"],
)
def test_indication_message_needs_one_value_per_period_for_each(
    measurements: list[Measurement],
) -> None:
    with pytest.raises(ValueError, match="same number of periods"):
        encode_indication_message(IndicationMessage(measurements))


def test_measurement_names_are_the_ts_28_552_ones() -> None:
    assert set(kpm.MEASUREMENTS) == {
        f"{name}{link}"
        for name in ("RRU.PrbUsed", "RRU.PrbAvail", "DRB.UEThp", "DRB.MeanActiveUe")
        for link in ("Dl", "Ul")
    } | {"RRC.ConnMean", "DRB.PdcpSduVolumeDL", "DRB.PdcpSduVolumeUL"}


# --- conformance with the reference modules -----------------------------------------------------


@pytest.mark.parametrize("period_ms", [1, 1000, 2**32 - 1])
def test_event_trigger_matches_the_reference(ref: Any, period_ms: int) -> None:
    value = {"eventDefinition-formats": ("eventDefinition-Format1", {"reportingPeriod": period_ms})}
    ours = kpm.encode_event_trigger(period_ms)
    assert ref.decode("E2SM-KPM-EventTriggerDefinition", ours) == value
    theirs = ref.encode("E2SM-KPM-EventTriggerDefinition", value)
    assert theirs == ours
    assert kpm.decode_event_trigger(theirs) == period_ms


@pytest.mark.parametrize(
    ("cell", "cgi"),
    [
        (None, None),
        (
            CellGlobalId(PLMN, nr_cell=0x123456789),
            ("nR-CGI", {"pLMNIdentity": PLMN, "nRCellIdentity": (bytes.fromhex("1234567890"), 36)}),
        ),
        (
            CellGlobalId(PLMN, eutra_cell=0xABCDEF1),
            (
                "eUTRA-CGI",
                {"pLMNIdentity": PLMN, "eUTRACellIdentity": (bytes.fromhex("abcdef10"), 28)},
            ),
        ),
    ],
    ids=["no-cell", "nr", "eutra"],
)
def test_action_definition_matches_the_reference(ref: Any, cell: CellGlobalId | None,
                                                 cgi: Any) -> None:
    names = ["RRU.PrbUsedDl", "RRU.PrbAvailDl", "DRB.UEThpDl"]
    format1: dict[str, Any] = {"measInfoList": ref_meas_info(*names), "granulPeriod": 500}
    if cgi is not None:
        format1["cellGlobalID"] = cgi
    value = ref_action(format1, style=1)
    ours = kpm.encode_action_definition(ActionDefinition(names, 500, cell), style=1)
    assert ref.decode("E2SM-KPM-ActionDefinition", ours) == value
    theirs = ref.encode("E2SM-KPM-ActionDefinition", value)
    assert theirs == ours
    assert kpm.decode_action_definition(theirs) == ActionDefinition(names, 500, cell)


def test_action_definition_style_reaches_the_reference(ref: Any) -> None:
    ours = kpm.encode_action_definition(ActionDefinition(["RRC.ConnMean"], 1000), style=4)
    assert ref.decode("E2SM-KPM-ActionDefinition", ours)["ric-Style-Type"] == 4


def test_labels_and_extensions_we_do_not_declare_are_skipped(ref: Any) -> None:
    """A node's labels (all root ones, some extension additions) and the extension additions of
    MeasurementInfoItem and action format 1 decode, even though our module leaves them out."""
    label = {
        "noLabel": "true",
        "plmnID": PLMN,
        "sliceID": {"sST": b"\x01", "sD": b"\x00\x00\x01"},
        "fiveQI": 9,
        "qFI": 1,
        "qCI": 8,
        "aRPmax": 15,
        "startEndInd": "end",
        "avg": "true",
        "ssbIndex": 3,
        "cellGlobalID": ("nR-CGI", {"pLMNIdentity": PLMN, "nRCellIdentity": (b"\x00" * 5, 36)}),
    }
    match_cond = [
        {"measValueReportCond": {"testExpr": "greaterthan", "testValue": ("valueInt", 5)}}
    ]
    bins = [
        {
            "measType": ("measName", "DRB.UEThpDl"),
            "binRangeDef": {
                "binRangeListX": [
                    {"binIndex": 1, "startValue": ("valueInt", 0), "endValue": ("valueInt", 9)}
                ]
            },
        }
    ]
    info = [
        {
            "measType": ("measName", "DRB.UEThpDl"),
            "labelInfoList": [{"measLabel": label}, {"measLabel": {"sUM": "true"}}],
            "matchCondReportList": match_cond,
        }
    ]
    format1 = {"measInfoList": info, "granulPeriod": 100, "distMeasBinRangeInfo": bins}
    theirs = ref.encode("E2SM-KPM-ActionDefinition", ref_action(format1))
    assert kpm.decode_action_definition(theirs) == ActionDefinition(["DRB.UEThpDl"], 100)
    message = ref_message({"measData": [{"measRecord": [("integer", 5)]}], "measInfoList": info})
    decoded = decode_indication_message(ref.encode("E2SM-KPM-IndicationMessage", message))
    assert decoded == IndicationMessage([Measurement("DRB.UEThpDl", [5.0])])


def test_indication_header_matches_the_reference(ref: Any) -> None:
    ours = encode_indication_header(START)
    assert ref.decode("E2SM-KPM-IndicationHeader", ours) == ref_header(ntp_bytes(START))
    assert ref.encode("E2SM-KPM-IndicationHeader", ref_header(ntp_bytes(START))) == ours


def test_indication_header_from_the_reference_with_every_optional_field(ref: Any) -> None:
    value = ref_header(
        ntp_bytes(START),
        fileFormatversion="32.432 V18",
        senderName="gnb-0017 du-1",
        senderType="gNB-DU",
        vendorName="Example RAN",
    )
    theirs = ref.encode("E2SM-KPM-IndicationHeader", value)
    assert decode_indication_header(theirs) == START
    # The optional strings are not part of the API, so check the module reads them itself: a
    # lenient fallback in the decoder would hide a header type that skips them.
    ours = asn1tools.compile_files(str(PROJECT_ASN), "per")
    assert ours.decode("KpmIndicationHeader", theirs) == value
    assert ours.encode("KpmIndicationHeader", value) == theirs


def test_indication_message_matches_the_reference(ref: Any) -> None:
    value = ref_message(
        {
            "measData": [
                {"measRecord": [("integer", 40), ("real", 812.25), ("noValue", None)]},
                {"measRecord": [("integer", 4294967295), ("real", 0.5), ("integer", 3)]},
            ],
            "measInfoList": ref_meas_info("RRU.PrbUsedDl", "DRB.UEThpDl", "DRB.MeanActiveUeDl"),
            "granulPeriod": 1000,
        }
    )
    msg = IndicationMessage(
        [
            Measurement("RRU.PrbUsedDl", [40.0, 4294967295.0]),
            Measurement("DRB.UEThpDl", [812.25, 0.5]),
            Measurement("DRB.MeanActiveUeDl", [None, 3.0]),
        ],
        granularity_ms=1000,
    )
    ours = encode_indication_message(msg)
    assert ref.decode("E2SM-KPM-IndicationMessage", ours) == value
    theirs = ref.encode("E2SM-KPM-IndicationMessage", value)
    assert theirs == ours
    assert decode_indication_message(theirs) == msg


def test_measdata_is_one_item_per_period_with_one_value_per_measurement(ref: Any) -> None:
    """Two measurements over three periods: measData has three items of two records each."""
    value = ref_message(
        {
            "measData": [
                {"measRecord": [("integer", 10), ("integer", 100)]},
                {"measRecord": [("integer", 11), ("integer", 101)]},
                {"measRecord": [("integer", 12), ("integer", 102)]},
            ],
            "measInfoList": ref_meas_info("RRU.PrbUsedUl", "RRU.PrbAvailUl"),
        }
    )
    decoded = decode_indication_message(ref.encode("E2SM-KPM-IndicationMessage", value))
    assert decoded == IndicationMessage(
        [
            Measurement("RRU.PrbUsedUl", [10.0, 11.0, 12.0]),
            Measurement("RRU.PrbAvailUl", [100.0, 101.0, 102.0]),
        ]
    )


def test_milan_like_report_three_measurements_one_period(ref: Any) -> None:
    """A 10-minute report of one cell, as the Milan data's step: one measData item, three values."""
    msg = IndicationMessage(
        [
            Measurement("DRB.UEThpDl", [18342.75]),
            Measurement("RRU.PrbUsedDl", [61.0]),
            Measurement("RRC.ConnMean", [37.0]),
        ],
        granularity_ms=600_000,
    )
    ours = encode_indication_message(msg)
    decoded = ref.decode("E2SM-KPM-IndicationMessage", ours)["indicationMessage-formats"][1]
    assert decoded["measData"] == [
        {"measRecord": [("real", 18342.75), ("integer", 61), ("integer", 37)]}
    ]
    assert decoded["granulPeriod"] == 600_000
    assert (
        decode_indication_message(
            ref.encode("E2SM-KPM-IndicationMessage", ref_message(decoded))
        )
        == msg
    )


def test_incomplete_periods_and_unsatisfied_values_decode_as_gaps(ref: Any) -> None:
    value = ref_message(
        {
            "measData": [
                {"measRecord": [("integer", 1), ("notSatisfied", None)]},
                {"measRecord": [("integer", 2), ("real", 2.5)], "incompleteFlag": "true"},
            ],
            "measInfoList": ref_meas_info("RRU.PrbUsedDl", "DRB.UEThpDl"),
        }
    )
    decoded = decode_indication_message(ref.encode("E2SM-KPM-IndicationMessage", value))
    assert [m.values for m in decoded.measurements] == [[1.0, None], [None, None]]


def test_records_that_do_not_match_meas_info_are_rejected(ref: Any) -> None:
    value = ref_message(
        {
            "measData": [{"measRecord": [("integer", 1)]}],
            "measInfoList": ref_meas_info("RRU.PrbUsedDl", "DRB.UEThpDl"),
        }
    )
    with pytest.raises(DecodeError) as caught:
        decode_indication_message(ref.encode("E2SM-KPM-IndicationMessage", value))
    assert caught.value.reason == "measurement-mismatch"


def test_without_meas_info_the_subscribed_names_apply(ref: Any) -> None:
    theirs = ref.encode(
        "E2SM-KPM-IndicationMessage", ref_message({"measData": [{"measRecord": [("integer", 7)]}]})
    )
    with pytest.raises(DecodeError) as caught:
        decode_indication_message(theirs)
    assert caught.value.reason == "measurement-mismatch"
    decoded = decode_indication_message(theirs, subscribed=["RRC.ConnMean"])
    assert decoded == IndicationMessage([Measurement("RRC.ConnMean", [7.0])])


def test_formats_other_than_1_are_rejected_as_such(ref: Any) -> None:
    format3 = {
        "measCondList": [
            {
                "measType": ("measName", "DRB.UEThpDl"),
                "matchingCond": [{"matchingCondChoice": ("measLabel", {"noLabel": "true"})}],
            }
        ],
        "granulPeriod": 1000,
    }
    action = {
        "ric-Style-Type": 3,
        "actionDefinition-formats": ("actionDefinition-Format3", format3),
    }
    report = {
        "measData": [{"measRecord": [("integer", 1)]}],
        "measInfoList": ref_meas_info("DRB.UEThpDl"),
    }
    ue_report = {"ueID": ("gNB-DU-UEID", {"gNB-CU-UE-F1AP-ID": 0}), "measReport": report}
    message = {
        "indicationMessage-formats": (
            "indicationMessage-Format3",
            {"ueMeasReportList": [ue_report]},
        )
    }
    cases: list[tuple[Callable[[bytes], object], bytes]] = [
        (kpm.decode_action_definition, ref.encode("E2SM-KPM-ActionDefinition", action)),
        (decode_indication_message, ref.encode("E2SM-KPM-IndicationMessage", message)),
    ]
    for decoder, data in cases:
        with pytest.raises(DecodeError) as caught:
            decoder(data)
        assert caught.value.reason == "format"


# --- the 4-octet colletStartTime of KPM v2 ------------------------------------------------------


@pytest.mark.parametrize(
    "seconds",
    [int(START.timestamp()), int(START.timestamp()) + NTP_UNIX_OFFSET],
    ids=["unix", "ntp"],
)
def test_kpm_v2_header_decodes_unix_and_ntp_seconds(ref_v2: Any, seconds: int) -> None:
    stamp = seconds.to_bytes(4, "big")
    theirs = ref_v2.encode("E2SM-KPM-IndicationHeader", ref_header(stamp))
    assert theirs == b"\x00" + stamp  # what a KPM v2 node puts on the wire
    assert decode_indication_header(theirs) == START.replace(microsecond=0)


def test_kpm_v2_header_with_optional_fields_decodes(ref_v2: Any) -> None:
    """Both readings can parse these bytes; only the 4-octet one accounts for all of them."""
    stamp = int(START.timestamp()).to_bytes(4, "big")
    for optional in ({"vendorName": "Acme"}, {"senderName": "cu-cp-1", "senderType": "gNB"}):
        theirs = ref_v2.encode("E2SM-KPM-IndicationHeader", ref_header(stamp, **optional))
        assert decode_indication_header(theirs) == START.replace(microsecond=0)


def test_hand_made_kpm_v2_header_decodes() -> None:
    # 2024-05-01T12:00:00Z as UNIX seconds, behind the 7 flag bits a v2 node writes as zero
    assert decode_indication_header(b"\x00" + (1_714_564_800).to_bytes(4, "big")) == datetime(
        2024, 5, 1, 12, tzinfo=UTC
    )


# --- RAN function description -------------------------------------------------------------------

V2_DESCRIPTION = """
E2SM-KPM-RANfunction-Description ::= SEQUENCE{
    ranFunction-Name            RANfunction-Name,
    ric-KPM-Node-List           SEQUENCE (SIZE(1..1024)) OF RIC-KPMNode-Item            OPTIONAL,
    ric-EventTriggerStyle-List  SEQUENCE (SIZE(1..maxnoofRICStyles)) OF RIC-EventTriggerStyle-Item
                                                                                        OPTIONAL,
    ric-ReportStyle-List        SEQUENCE (SIZE(1..maxnoofRICStyles)) OF RIC-ReportStyle-Item
                                                                                        OPTIONAL,
    ...
}
RIC-KPMNode-Item ::= SEQUENCE {
    ric-KPMNode-Type                GlobalKPMnode-ID,
    cell-Measurement-Object-List    SEQUENCE (SIZE(1..16384)) OF Cell-Measurement-Object-Item
                                                                                        OPTIONAL,
    ...
}
Cell-Measurement-Object-Item ::= SEQUENCE {
    cell-object-ID      PrintableString (SIZE(0..400, ...)),
    cell-global-ID      CGI,
    ...
}
GlobalKPMnode-ID ::= CHOICE {
    gNB     SEQUENCE { global-gNB-ID GlobalGNB-ID, gNB-CU-UP-ID GNB-CU-UP-ID OPTIONAL,
                       gNB-DU-ID GNB-DU-ID OPTIONAL, ... },
    en-gNB  SEQUENCE { global-gNB-ID GlobalenGNB-ID, gNB-CU-UP-ID GNB-CU-UP-ID OPTIONAL,
                       gNB-DU-ID GNB-DU-ID OPTIONAL, ... },
    ng-eNB  SEQUENCE { global-ng-eNB-ID GlobalNgENB-ID, gNB-DU-ID GNB-DU-ID OPTIONAL, ... },
    eNB     SEQUENCE { global-eNB-ID GlobalENB-ID, ... },
    ...
}
"""


@pytest.fixture(scope="module")
def ref_kpm_v2() -> asn1tools.compiler.Specification:
    """The reference with KPM v2's RAN function description: the node list (each node by its
    global id, its cells by object id and global id) before the styles. KPM v2's own module is
    not at hand; its node ids are the E2SM common ones of the same shape."""
    kpm_text, common_text = _reference_texts()
    v4 = kpm_text[kpm_text.index("E2SM-KPM-RANfunction-Description ::="):]
    v4 = v4[:v4.index("}") + 1]
    imports = "IMPORTS\n    CGI,"
    assert v4 in kpm_text and imports in kpm_text
    v2_text = kpm_text.replace(v4, V2_DESCRIPTION).replace(imports, (
        "IMPORTS\n    GlobalGNB-ID, GlobalenGNB-ID, GlobalNgENB-ID, GlobalENB-ID, GNB-CU-UP-ID,"
        "\n    GNB-DU-ID,\n    CGI,"))
    return asn1tools.compile_string(f"{v2_text}\n{common_text}\n", "per")


def ref_description(**lists: Any) -> dict[str, Any]:
    return {
        "ranFunction-Name": {"ranFunction-ShortName": "ORAN-E2SM-KPM",
                             "ranFunction-E2SM-OID": kpm.OID_V3,
                             "ranFunction-Description": "KPM Monitor",
                             "ranFunction-Instance": 1},
        "ric-EventTriggerStyle-List": [{"ric-EventTriggerStyle-Type": 1,
                                        "ric-EventTriggerStyle-Name": "Periodic Report",
                                        "ric-EventTriggerFormat-Type": 1}],
        "ric-ReportStyle-List": [
            {"ric-ReportStyle-Type": style, "ric-ReportStyle-Name": "E2 Node Measurement",
             "ric-ActionFormat-Type": style,
             "measInfo-Action-List": [{"measName": name, "measID": i + 1}
                                      for i, name in enumerate(names)],
             "ric-IndicationHeaderFormat-Type": 1, "ric-IndicationMessageFormat-Type": 1}
            for style, names in ((1, ["RRU.PrbUsedDl", "DRB.UEThpDl"]), (4, ["RRC.ConnMean"]))],
        **lists,
    }


def test_ran_function_description_matches_the_reference(ref: Any) -> None:
    ours = kpm.RanFunctionDescription(kpm.SHORT_NAME, kpm.OID_V3,
                                      {1: ["RRU.PrbUsedDl", "DRB.UEThpDl"]})
    theirs = ref.decode("E2SM-KPM-RANfunction-Description",
                        kpm.encode_ran_function_description(ours))
    assert [i["measName"] for i in theirs["ric-ReportStyle-List"][0]["measInfo-Action-List"]] \
        == ["RRU.PrbUsedDl", "DRB.UEThpDl"]
    assert theirs["ranFunction-Name"]["ranFunction-E2SM-OID"] == kpm.OID_V3
    # A node's, with ids, an instance, two styles and KPM v4's bin ranges (an extension
    # this xApp does not declare, skipped).
    value = ref_description()
    value["ric-ReportStyle-List"][0]["measInfo-Action-List"][0]["binRangeDef"] = {
        "binRangeListX": [{"binIndex": 1, "startValue": ("valueInt", 0),
                           "endValue": ("valueInt", 5)}]}
    read = kpm.decode_ran_function_description(
        ref.encode("E2SM-KPM-RANfunction-Description", value))
    assert read.version == 3 and read.cells is None
    assert read.report_styles == {1: ["RRU.PrbUsedDl", "DRB.UEThpDl"], 4: ["RRC.ConnMean"]}
    assert read.measurements() == ["RRU.PrbUsedDl", "DRB.UEThpDl"]


def test_kpm_v2_ran_function_description_is_read_with_its_cells(ref_kpm_v2: Any) -> None:
    cells = [CellGlobalId(PLMN, nr_cell=2**36 - 1), CellGlobalId(PLMN, eutra_cell=5)]
    value = ref_description(**{"ric-KPM-Node-List": [{
        "ric-KPMNode-Type": ("gNB", {"global-gNB-ID": {
            "pLMNIdentity": PLMN, "gNB-ID": ("gNB-ID", (b"\x00\x00\x01", 22))},
            "gNB-DU-ID": 7}),
        "cell-Measurement-Object-List": [
            {"cell-object-ID": "NRCellDU=1", "cell-global-ID": (
                "nR-CGI", {"pLMNIdentity": PLMN, "nRCellIdentity": (b"\xff" * 4 + b"\xf0", 36)})},
            {"cell-object-ID": "EUtranCell=2", "cell-global-ID": (
                "eUTRA-CGI", {"pLMNIdentity": PLMN,
                              "eUTRACellIdentity": (b"\x00\x00\x00\x50", 28)})}]}]})
    value["ranFunction-Name"]["ranFunction-E2SM-OID"] = kpm.OID_V2
    read = kpm.decode_ran_function_description(
        ref_kpm_v2.encode("E2SM-KPM-RANfunction-Description", value))
    assert read.version == 2
    assert read.cells == [kpm.CellObject("NRCellDU=1", cells[0]),
                          kpm.CellObject("EUtranCell=2", cells[1])]
    assert read.measurements() == ["RRU.PrbUsedDl", "DRB.UEThpDl"]
    # And what the mock node declares as a v2 node, the reference reads as v2's.
    ours = kpm.RanFunctionDescription(kpm.SHORT_NAME, kpm.OID_V2, {1: ["RRU.PrbUsedDl"]}, 2,
                                      [kpm.CellObject("cell-0", cells[0])])
    theirs = ref_kpm_v2.decode("E2SM-KPM-RANfunction-Description",
                               kpm.encode_ran_function_description(ours))
    (node,) = theirs["ric-KPM-Node-List"]
    assert node["cell-Measurement-Object-List"][0]["cell-object-ID"] == "cell-0"


def test_what_is_no_kpm_ran_function_description_is_refused() -> None:
    for data in (b"", b"\x00\x01\xff", bytes(range(40))):
        with pytest.raises(DecodeError):
            kpm.decode_ran_function_description(data)


# --- E2AP ---------------------------------------------------------------------------------------

HEADER = encode_indication_header(START)
MESSAGE = encode_indication_message(
    IndicationMessage([Measurement("RRU.PrbUsedDl", [40.0]), Measurement("DRB.UEThpDl", [1.5])])
)
TRIGGER = kpm.encode_event_trigger(1000)
ACTION = kpm.encode_action_definition(ActionDefinition(["RRU.PrbUsedDl", "DRB.UEThpDl"], 1000))
CAUSE = ("ricRequest", "action-not-supported")

PDUS: dict[str, bytes] = {
    "subscription_request": e2ap.encode_subscription_request(1001, 7, 2, TRIGGER, 3, ACTION),
    "subscription_response": e2ap.encode_subscription_response(1001, 7, 2, [3], {4: CAUSE}),
    "subscription_failure": e2ap.encode_subscription_failure(1001, 7, 2, ("misc", "unspecified")),
    "subscription_delete_request": e2ap.encode_subscription_delete_request(1001, 7, 2),
    "indication": e2ap.encode_indication(1001, 7, 2, 3, 65535, HEADER, MESSAGE),
}

# message type -> its IE set in pycrate's E2AP-PDU-Contents
IE_SETS = {
    "RICsubscriptionRequest": "RICsubscriptionRequest_IEs",
    "RICsubscriptionResponse": "RICsubscriptionResponse_IEs",
    "RICsubscriptionFailure": "RICsubscriptionFailure_IEs",
    "RICsubscriptionDeleteRequest": "RICsubscriptionDeleteRequest_IEs",
    "RICindication": "RICindication_IEs",
}
ITEM_SETS = {
    "RICaction-ToBeSetup-Item": "RICaction_ToBeSetup_ItemIEs",
    "RICaction-Admitted-Item": "RICaction_Admitted_ItemIEs",
    "RICaction-NotAdmitted-Item": "RICaction_NotAdmitted_ItemIEs",
}


def test_e2ap_pdus_round_trip() -> None:
    decoded = {kind: e2ap.decode(data) for kind, data in PDUS.items()}
    assert {kind: m.kind for kind, m in decoded.items()} == {kind: kind for kind in PDUS}
    for message in decoded.values():
        assert (message.requestor_id, message.instance_id, message.ran_function_id) == (1001, 7, 2)
    request = decoded["subscription_request"]
    assert (request.event_trigger, request.action_id, request.action_definition) == (
        TRIGGER,
        3,
        ACTION,
    )
    response = decoded["subscription_response"]
    assert (response.admitted, response.not_admitted) == ((3,), {4: CAUSE})
    assert decoded["subscription_failure"].cause == ("misc", "unspecified")
    indication = decoded["indication"]
    assert (indication.action_id, indication.sequence_number) == (3, 65535)
    assert decode_indication_header(indication.header) == START
    assert decode_indication_message(indication.message).measurements[1].values == [1.5]


def test_e2ap_optional_parts_may_be_absent() -> None:
    response = e2ap.decode(e2ap.encode_subscription_response(1, 0, 0, [0, 1]))
    assert (response.admitted, response.not_admitted) == ((0, 1), {})
    indication = e2ap.decode(e2ap.encode_indication(1, 0, 0, 0, None, HEADER, MESSAGE))
    assert indication.sequence_number is None


def _pycrate_value(data: bytes) -> Any:
    from pycrate_asn1dir import E2AP

    pdu = E2AP.E2AP_PDU_Descriptions.E2AP_PDU
    pdu.from_aper(data)
    return pdu.get_val()


def _criticalities(ie_set: Any) -> dict[int, str]:
    return {ie["id"]: ie["criticality"] for ie in ie_set._val.root + (ie_set._val.ext or [])}


def _action_items(type_name: str, value: Any) -> list[dict[str, Any]]:
    if type_name == "RICsubscriptionDetails":
        return value["ricAction-ToBeSetup-List"]
    return value if type_name in ("RICaction-Admitted-List", "RICaction-NotAdmitted-List") else []


@pytest.mark.parametrize("kind", PDUS)
def test_e2ap_ids_and_criticalities_follow_the_e2ap_tables(kind: str) -> None:
    from pycrate_asn1dir import E2AP

    tables = E2AP.E2AP_PDU_Contents
    procedures = {
        p["procedureCode"]: p["criticality"]
        for p in E2AP.E2AP_PDU_Descriptions.E2AP_ELEMENTARY_PROCEDURES._val.root
    }
    _, body = _pycrate_value(PDUS[kind])
    assert body["procedureCode"] == {"indication": 5, "subscription_delete_request": 9}.get(kind, 8)
    assert body["criticality"] == procedures[body["procedureCode"]]
    message_type, content = body["value"]
    table = _criticalities(getattr(tables, IE_SETS[message_type]))
    for ie in content["protocolIEs"]:
        assert table[ie["id"]] == ie["criticality"], ie["id"]
        for item in _action_items(*ie["value"]):
            item_table = _criticalities(getattr(tables, ITEM_SETS[item["value"][0]]))
            assert item_table[item["id"]] == item["criticality"], item["id"]


def test_e2ap_ids_are_the_standard_numbers() -> None:
    _, body = _pycrate_value(PDUS["indication"])
    ids = [ie["id"] for ie in body["value"][1]["protocolIEs"]]
    assert ids == [29, 5, 15, 27, 28, 25, 26]
    _, body = _pycrate_value(PDUS["subscription_request"])
    assert [ie["id"] for ie in body["value"][1]["protocolIEs"]] == [29, 5, 30]


def test_e2ap_refuses_values_out_of_range() -> None:
    with pytest.raises(ValueError):
        e2ap.encode_subscription_delete_request(65536, 0, 0)
    with pytest.raises(ValueError):
        e2ap.encode_subscription_response(1, 0, 0, admitted=[])
    with pytest.raises(ValueError):
        e2ap.encode_subscription_failure(1, 0, 0, ("ricRequest", "no-such-cause"))


def test_e2ap_rejects_pdus_it_does_not_handle() -> None:
    from pycrate_asn1dir import E2AP

    pdu = E2AP.E2AP_PDU_Descriptions.E2AP_PDU
    # a delete request without its mandatory RICrequestID
    pdu.set_val(
        (
            "initiatingMessage",
            {
                "procedureCode": 9,
                "criticality": "reject",
                "value": (
                    "RICsubscriptionDeleteRequest",
                    {
                        "protocolIEs": [
                            {"id": 5, "criticality": "reject", "value": ("RANfunctionID", 2)}
                        ]
                    },
                ),
            },
        )
    )
    missing_ie = pdu.to_aper()
    # a RIC service query: a valid E2AP PDU, but not one of a KPM subscription
    pdu.set_val(
        (
            "initiatingMessage",
            {
                "procedureCode": 6,
                "criticality": "ignore",
                "value": ("RICserviceQuery", {"protocolIEs": []}),
            },
        )
    )
    other_procedure = pdu.to_aper()
    for data in (missing_ie, other_procedure, b"", b"\xff" * 8):
        with pytest.raises(DecodeError) as caught:
            e2ap.decode(data)
        assert caught.value.reason == "e2ap"


# --- fuzzing: every input decodes or is rejected, nothing else escapes ---------------------------

DECODERS: dict[str, Callable[[bytes], object]] = {
    "trigger": kpm.decode_event_trigger,
    "action": kpm.decode_action_definition,
    "header": decode_indication_header,
    "message": decode_indication_message,
    "description": kpm.decode_ran_function_description,
    "e2ap": e2ap.decode,
}
SEEDS: dict[str, list[bytes]] = {
    "trigger": [TRIGGER, kpm.encode_event_trigger(2**32 - 1)],
    "action": [
        ACTION,
        kpm.encode_action_definition(
            ActionDefinition(list(kpm.MEASUREMENTS), 100, CellGlobalId(PLMN, nr_cell=99))
        ),
    ],
    "header": [HEADER, b"\x00" + (1_714_564_800).to_bytes(4, "big")],
    "message": [
        MESSAGE,
        encode_indication_message(
            IndicationMessage(
                [
                    Measurement("RRC.ConnMean", [1.0, None, 0.25]),
                    Measurement("DRB.UEThpUl", [1e9, 2.0, 3.0]),
                ],
                granularity_ms=1000,
            )
        ),
    ],
    "description": [
        kpm.encode_ran_function_description(kpm.RanFunctionDescription(
            kpm.SHORT_NAME, kpm.OID_V3, {1: list(kpm.MEASUREMENTS)})),
        kpm.encode_ran_function_description(kpm.RanFunctionDescription(
            kpm.SHORT_NAME, kpm.OID_V2, {1: ["RRU.PrbUsedDl"]}, 2,
            [kpm.CellObject("c", CellGlobalId(PLMN, nr_cell=3))])),
    ],
    "e2ap": list(PDUS.values()),
}
FUZZ = settings(max_examples=300, deadline=None, database=None)


def _outcome(decoder: Callable[[bytes], object], data: bytes) -> str:
    try:
        decoder(data)
    except DecodeError as exc:
        assert exc.reason in {"per", "format", "measurement-mismatch", "e2ap"}
        return "rejected"
    return "decoded"


@pytest.mark.parametrize("name", DECODERS)
def test_decoders_reject_what_is_not_bytes(name: str) -> None:
    for data in (5, "text", None):
        with pytest.raises(DecodeError):
            DECODERS[name](data)  # type: ignore[arg-type]


@st.composite
def mutations(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """A valid encoding with a few bits flipped, bytes inserted or deleted, or its tail cut."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        operation = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        if operation == "insert":
            data.insert(at, draw(st.integers(0, 255)))
        elif not data:
            continue
        elif operation == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif operation == "delete":
            del data[at]
        else:
            del data[at:]
    return bytes(data)


@pytest.mark.parametrize("name", DECODERS)
@FUZZ
@given(data=st.binary(max_size=256))
def test_random_bytes_decode_or_are_rejected(name: str, data: bytes) -> None:
    event(_outcome(DECODERS[name], data))


@pytest.mark.parametrize("name", DECODERS)
@FUZZ
@given(draw=st.data())
def test_mutated_encodings_decode_or_are_rejected(name: str, draw: st.DataObject) -> None:
    event(_outcome(DECODERS[name], draw.draw(mutations(SEEDS[name]))))
