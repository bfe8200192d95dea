"""chat_en: hand-written English conversations (part B: writing help, work, advice)."""

CONVERSATIONS = [
[
("user", r'''
I need to decline a job offer politely. I liked the team but accepted another offer with better pay. Can you draft the email? The hiring manager is called Dana.
'''),
("assistant", r'''
Here's a draft you can adjust:

---

**Subject:** Job offer – [Your Name]

Hi Dana,

Thank you very much for offering me the [Job Title] position and for the time you and the team spent with me during the interviews. I really enjoyed meeting everyone and learning about your plans for [project/team].

After a lot of thought, I've decided to accept another offer that is a better fit for me at this point. This was not an easy decision, and it's no reflection on the role or the team, which I was genuinely impressed by.

I'd be glad to stay in touch, and I hope our paths cross again.

Thank you again for your consideration.

Best regards,
[Your Name]

---

A few notes:

- **Send it soon.** The team may want to contact their second choice quickly.
- **You don't need to mention salary.** "A better fit for me at this point" is honest and gracious. If Dana asks directly, it's fine to say compensation was a factor.
- **Keep it short.** Long explanations can read as defensive.
'''),
],
[
("user", r'''
Can you make this customer support reply sound friendlier? It's going to a customer whose order was late.

"Your order was delayed due to carrier issues. It will arrive Thursday. We cannot refund shipping as per policy."
'''),
("assistant", r'''
Here's a warmer version that keeps the same facts:

> Hi [Name],
>
> I'm sorry your order didn't arrive when we promised. I know that's frustrating, especially if you were counting on it. The delay was caused by a problem with our delivery carrier, and I've checked the tracking: your package is on its way and should reach you on **Thursday**.
>
> I wish I could refund the shipping cost, but our policy doesn't allow refunds for carrier delays. [If you can offer something: *What I can do is add a 10% discount code to your account for your next order: THANKYOU10.*]
>
> If anything else comes up, just reply to this email and I'll be happy to help.
>
> Warm regards,
> [Your name]

What changed and why:

- **An apology first.** The original explains before it acknowledges the customer's frustration.
- **"I've checked"** makes it feel like a person looked into their case, not a form letter.
- **Softer wording for the "no":** "I wish I could... but" instead of "We cannot... as per policy". It's still a clear no.
- **An offer, if you have one to give.** Even a small gesture changes how the "no" lands. If you can't offer anything, just remove that sentence; the rest still works.
- **A clear next step:** they know how to get more help.
'''),
],
[
("user", r'''
Brainstorm some names for a small neighbourhood bakery that specialises in sourdough. Cozy vibe, not too punny.
'''),
("assistant", r'''
Here are some ideas, grouped by feel:

**Warm and simple**
- Morning Loaf
- The Crumb & Crust
- Hearth Street Bakery
- Daily Rise
- Slow Rise Bakehouse

**Sourdough-specific (without being too punny)**
- Wild Yeast Bakery
- Mother Dough
- Levain & Co.
- The Starter Jar
- Long Ferment

**Neighbourhood feel** (swap in your street or area name)
- [Street Name] Bread Co.
- Corner Oven
- Little Lantern Bakery
- The Flour Porch

**Slightly whimsical but still cozy**
- Honey & Rye
- Butter Bell
- The Warm Loaf

Before you pick one: say it out loud as if answering the phone, check that the domain and social handles are free, and search your local business registry to make sure nobody nearby already uses it. If you tell me your neighbourhood's name or something special about your bakery (a family recipe, a historic building), I can suggest more personal options.
'''),
],
[
("user", r'''
Write a short poem about commuting on a rainy autumn morning. Free verse is fine.
'''),
("assistant", r'''
**Platform Four, 7:42**

The rain arrives before the train does,
writing its small grey sentences
on the shoulders of strangers.

Umbrellas open like a slow applause.
Someone's coffee steams into the cold,
a little ghost of summer
that no one bothers to catch.

Leaves have given up the trees
and settled on the tracks,
yellow tickets for a journey
they will never take.

Then the lights, the hiss, the doors —
and all of us, damp and half awake,
step into the warm bright carriage
as if it were the first kind thing
that's happened all day.
'''),
],
[
("user", r'''
Renting vs buying a home: can you give me a balanced comparison in a table? I'm 29, single, might move cities for work in a few years.
'''),
("assistant", r'''
Here's a general comparison, then some thoughts on your situation.

| | Renting | Buying |
|---|---|---|
| **Upfront cost** | Deposit + first month | Down payment (often 5–20%) + closing costs (often 2–5% of the price) |
| **Monthly cost** | Rent, which can rise at renewal | Mortgage (fixed or variable), property tax, insurance, maintenance |
| **Flexibility** | High: move at the end of a lease | Low: selling takes time and costs money (agent fees, taxes, moving) |
| **Maintenance** | Landlord's job | Yours: budget roughly 1% of the home's value per year |
| **Building wealth** | Only if you invest the money you'd otherwise put into a home | Mortgage payments gradually build equity; prices *may* rise |
| **Risk** | Rent increases, landlord selling | Price drops, interest-rate changes, big surprise repairs |
| **Control** | Limited (pets, renovations need permission) | Full control over changes |

**For someone who might move in a few years**, the biggest factor is usually the **transaction costs**. Buying and then selling a home typically costs several percent of its value in fees and taxes. If you sell after only two or three years, price growth may not cover those costs, and early mortgage payments are mostly interest rather than equity.

A common rule of thumb is that buying starts to make sense if you expect to stay **at least about five years**, though it depends heavily on your local market, the price-to-rent ratio, and interest rates.

What often works well in your position: rent, keep flexibility for career moves, and invest the difference between your rent and what owning would cost you. Revisit the question once you know where you'll settle. If you want, tell me your city, rent and a typical home price, and I'll walk through a rough break-even calculation.
'''),
],
[
("user", r'''
How do I ask my manager for a raise without it being awkward?
'''),
("assistant", r'''
It's much less awkward if you treat it as a normal business conversation backed by evidence. Here's a practical approach.

**1. Prepare your case (1–2 weeks before)**
- **Collect evidence of impact:** projects you delivered, problems you solved, numbers if you have them ("cut report generation from 2 days to 3 hours"), extra responsibilities you've taken on, positive feedback.
- **Research the market:** salary surveys, job postings with ranges, conversations with peers in similar roles. Aim for a specific number or narrow range.
- **Know your floor:** what would you accept, and what will you do if the answer is no?

**2. Pick the right moment**
- Ask for a dedicated meeting instead of springing it at the end of a 1:1: "I'd like to set up some time to talk about my compensation."
- Good timing: a few weeks before budgets are set or review cycles, or right after a visible success. Avoid the week your manager is fighting a fire.

**3. In the meeting**
- Open clearly: "I'd like to discuss my salary. Based on what I've taken on this year and what the market pays for this role, I'm asking for an increase to $X."
- Then walk through two or three strongest points. Keep it about value and market, not personal expenses.
- **Stop talking after you state the number.** Silence feels awkward, but filling it often leads to negotiating against yourself.

**4. Handle the response**
- **Yes:** thank them and ask when it takes effect, and get it in writing.
- **"Not now":** ask what specifically would need to happen and by when, and schedule a follow-up. "What would you need to see from me to get to $X by the next review?"
- **No, with no path:** that's useful information too, about whether your growth is possible there.

Practise the opening line out loud a few times. Most of the awkwardness is in the first sentence; once it's said, it becomes a normal conversation.
'''),
],
[
("user", r'''
I have a coworker who keeps taking credit for my work in meetings. How should I handle it?
'''),
("assistant", r'''
That's frustrating, and it's worth addressing before it becomes a pattern people accept. Here's an escalating approach: start light, escalate only if needed.

**1. Make your work visible by default**
- Send short recap emails after you finish something: "Quick update: I finished the vendor analysis; summary attached."
- Present your own work in meetings when possible, or ask your manager for the slot.
- Use shared docs with your name on them and version history.

This protects you regardless of the coworker's intent.

**2. Claim it in the moment, calmly**
When they present your work, add to it rather than accuse:
> "Thanks for mentioning that. When I put together that analysis, the thing that surprised me most was..."

It signals ownership and shows your depth on the topic, without drama.

**3. Talk to them privately**
Assume good faith at first; sometimes people say "we" loosely or don't realise.
> "In yesterday's meeting, the migration plan came across as your work. I spent two weeks on it, so I'd like to make sure it's clear who did what. Going forward, can we each present our own parts?"

Stay factual and focused on the future, not on their character.

**4. Involve your manager if it continues**
Frame it as a visibility issue with evidence (dates, documents, emails), not a complaint about a person:
> "I want to make sure my contributions are visible. On these two projects, my work was presented by someone else. Could we set up a way for me to report on my own work directly?"

Keep notes throughout: dates, what happened, who was present. You'll probably never need them, but if you do, specifics are far more convincing than a general sense of unfairness.
'''),
],
[
("user", r'''
I'm writing a cover letter for a junior data analyst role at a public health nonprofit. Can you write a strong opening paragraph? Background: economics degree, 1 year as a research assistant doing survey data cleaning in R, volunteer at a food bank.
'''),
("assistant", r'''
Here's an opening paragraph that connects your background to their mission:

> Dear Hiring Team,
>
> Over the past year as a research assistant, I spent most of my days turning messy survey data into something decision-makers could trust: cleaning and validating responses in R, documenting every transformation, and building summaries that held up to scrutiny. Volunteering at my local food bank showed me the other side of that work: the families behind the numbers, and how much depends on getting the analysis right. That combination is why I'm excited to apply for the Junior Data Analyst position at [Organisation], where rigorous data work directly supports public health.

Why it works:

- **It opens with what you actually did**, concretely, instead of "I am writing to apply for...".
- **It connects skills to mission.** Nonprofits want people who care about the cause; the food bank detail does that without sounding forced.
- **It names a transferable strength** (trustworthy, documented data work) that matters a lot in public health, where data quality problems have real consequences.

For the next paragraph, I'd pick one specific example with a result, e.g. "I found and fixed a coding error affecting 12% of responses in a 4,000-person survey", and mention any statistics or visualisation tools you know beyond R. If you tell me more about the organisation's focus, I can tailor it further.
'''),
],
[
("user", r'''
Write a LinkedIn post announcing I'm starting a new job as a product designer at a company called Fieldnote. Not cringe please.
'''),
("assistant", r'''
Here are two options, one short and one with a bit more story. Both avoid the usual "humbled and honoured" phrasing.

**Option 1: short**

> Some news: I've started as a Product Designer at Fieldnote.
>
> I'll be working on [area, e.g. the mobile app / onboarding / tools for field researchers], and I'm excited to spend my days on a product I'd actually use.
>
> Thank you to everyone who took coffee chats, reviewed my portfolio, or sent an encouraging message during the search. It made a real difference.

**Option 2: a bit more story**

> After [X years] at [Previous Company], I've joined Fieldnote as a Product Designer.
>
> What drew me in: [one genuine reason, e.g. "a team that talks to users every week, not every quarter" or "the chance to design for people who work offline, in the field"].
>
> I'm grateful to my former teammates at [Previous Company], especially [Name], who taught me to sketch ten bad ideas before falling in love with one.
>
> If you're working on [relevant topic], I'd love to compare notes.

Tips: add one photo (your new desk, the team, or your first-week notebook; people engage more with a real image than with a logo), tag the company, and reply to comments in the first few hours.
'''),
],
[
("user", r'''
Can you write a short toast for my best friend's wedding? Her name is Maya, her husband is Theo. We met in college when we were assigned as roommates and she taught me how to cook. 2 minutes max.
'''),
("assistant", r'''
Here's a toast that runs about a minute and a half when spoken at a relaxed pace:

---

Good evening, everyone. For those who don't know me, I'm [Your Name], and I've been Maya's friend since the day a college housing office decided we should share a very small room.

At the time, I could make exactly two things: toast and excuses. Maya looked at me, looked at our tiny kitchen, and decided that was unacceptable. Over that year she taught me to cook, and along the way, without either of us noticing, she taught me what it looks like to take care of someone. She's patient, she's generous, and she will absolutely tell you when you've added too much salt.

So when Maya started talking about Theo, I paid attention. And what I noticed was this: he makes her laugh the way she laughs with her oldest friends. He shows up. He listens. And he has, I'm told, learned to cook at least one dish to her standards, which I can tell you is not easy.

Theo, you're getting someone who will always make sure there's a seat at the table for you. Maya, you've found someone who deserves that seat.

So please raise your glasses: to Maya and Theo. May your kitchen always be full, your table always be crowded, and your home always feel like the best place to be.

To Maya and Theo!

---

If you have a specific funny cooking story from college, swapping it in for the "toast and excuses" line will make it even more personal.
'''),
],
[
("user", r'''
Help me write a resignation letter. I've been at the company 4 years, leaving on good terms, last day will be two weeks from Friday.
'''),
("assistant", r'''
Here's a professional, warm resignation letter:

---

**Subject:** Resignation – [Your Name]

Dear [Manager's Name],

Please accept this letter as formal notice of my resignation from my position as [Job Title] at [Company]. My last day will be [date, two weeks from Friday].

These past four years have been an important part of my career. I'm grateful for the opportunities I've had here, particularly [a specific project, skill or experience], and for your support and guidance along the way.

Over the next two weeks I'll do everything I can to make the transition smooth, including documenting my current projects and helping to hand over my responsibilities. Please let me know how I can best help.

Thank you again for everything. I hope to stay in touch.

Kind regards,
[Your Name]

---

Practical tips:

- **Tell your manager in person or on a call first**, then send the letter as confirmation. Finding out from an email is rarely welcome.
- **Keep the letter brief.** Reasons for leaving, feedback and grievances belong in a conversation or exit interview, not in a document that goes into your file.
- **Fill in the specific detail** in the second paragraph. One genuine, concrete line makes it feel personal rather than templated.
'''),
],
[
("user", r'''
I sent an email to a potential client a week ago and got no reply. How do I follow up without sounding pushy?
'''),
("assistant", r'''
A week is a perfectly reasonable time to follow up. People are busy, and emails get buried all the time; most replies to sales and business emails actually come after a follow-up.

Keep it short, reply in the same thread (so they have context), and make it easy to respond:

> **Subject:** Re: [original subject]
>
> Hi [Name],
>
> I wanted to bring this back to the top of your inbox in case it got buried. Would it be useful to have a quick 15-minute call next week to see whether [your service] could help with [their specific problem]?
>
> If the timing isn't right, no problem at all. Just let me know and I'll check back in a few months.
>
> Best,
> [Your name]

Why this works:

- **No guilt-tripping.** Avoid "Just following up again..." or "I haven't heard back...".
- **A specific, small ask** (15 minutes, next week) is easier to say yes to than "let me know your thoughts".
- **An easy out** ("if the timing isn't right") paradoxically gets more replies, because saying "not now" feels low-stakes.

If there's still no answer, one more follow-up after another week or two is fine, ideally adding something of value: a relevant article, a case study, a short idea specific to their business. After that, let it rest.
'''),
],
[
("user", r'''
My landlord hasn't fixed a leaking bathroom tap for 5 weeks despite two texts. Can you help me write a firmer letter? I don't want to burn the relationship.
'''),
("assistant", r'''
Here's a firm but polite letter. Putting it in writing (email or letter rather than text) also gives you a clear record.

---

**Subject:** Repair request – leaking bathroom tap at [Address]

Dear [Landlord's Name],

I'm writing about the leaking tap in the bathroom at [address], which I first reported by text on [date] and again on [date]. It has now been leaking for about five weeks.

The leak is getting worse and is wasting a significant amount of water. I'm also concerned it could cause damage to the sink and surrounding area if it continues.

Could you please arrange for the repair within the next 7 days, by [specific date]? I'm happy to provide access at a convenient time; I'm available [days/times], or I can arrange for someone to let a plumber in.

Please let me know by [date, ~3 days away] when the repair will be scheduled.

Thank you, and I appreciate your help in getting this sorted.

Kind regards,
[Your Name]
[Phone number]

---

Why it's written this way:

- **Dates of earlier requests** show this isn't a first complaint, without sounding accusatory.
- **A specific deadline** turns a vague request into a clear expectation.
- **It makes access easy**, removing a common excuse for delays.
- **It stays polite**, which preserves the relationship and looks reasonable if you ever need to show it to anyone else.

Keep a copy and take a short video of the leak. If there's still no response, look up your local tenant rights organisation: rules on repair timelines and what tenants can do next vary a lot by country and city.
'''),
],
[
("user", r'''
Write a product description for a reusable water bottle: 750 ml, stainless steel, keeps drinks cold 24h / hot 12h, leakproof lid, fits car cup holders. For an online shop.
'''),
("assistant", r'''
**The Everyday Bottle – 750 ml Insulated Stainless Steel**

Cold when you want cold. Hot when you want hot. And never in your bag when it shouldn't be.

Our double-walled, vacuum-insulated bottle keeps drinks **ice-cold for up to 24 hours** and **hot for up to 12**, so your morning coffee is still worth drinking at lunch and your afternoon water is still cold on the drive home.

**Why you'll reach for it every day**

- **Leakproof lid:** toss it in your backpack next to your laptop with confidence.
- **Fits car cup holders:** a slim base that goes where you go.
- **750 ml capacity:** enough for a long morning without constant refills.
- **Food-grade stainless steel:** no plastic taste, no lingering flavours from yesterday's tea.
- **No condensation:** the outside stays dry, so no more wet rings on your desk.

**Details**

| | |
|---|---|
| Capacity | 750 ml (25 fl oz) |
| Material | Double-wall stainless steel |
| Keeps cold | Up to 24 hours |
| Keeps hot | Up to 12 hours |
| Lid | Leakproof screw-top |
| Care | Hand wash recommended |

One bottle, a lot fewer disposable ones.

---

Before publishing, double-check two claims with your supplier: the exact steel grade (18/8 is common, and customers often look for it) and whether the lid is dishwasher-safe. If it is, say so; it's a frequent question.
'''),
],
[
("user", r'''
Proofread this and list what you changed:

"Their going to announce the results tomorrow, however the committee have not decided weather to publish the full data. Its a difficult decision, less people trust the process then before."
'''),
("assistant", r'''
Corrected version:

> They're going to announce the results tomorrow; however, the committee has not decided whether to publish the full data. It's a difficult decision: fewer people trust the process than before.

Changes:

| original | corrected | why |
|---|---|---|
| Their | They're | "they are"; *their* is possessive |
| tomorrow, however the | tomorrow; however, the | *however* joining two full sentences needs a semicolon (or a full stop) before it and a comma after it |
| committee have | committee has | In American English a collective noun like *committee* takes a singular verb. (British English often uses *have*, so this one depends on your style guide.) |
| weather | whether | *weather* is rain and sun; *whether* introduces alternatives |
| Its | It's | "it is"; *its* is possessive |
| decision, less | decision: fewer | the comma joined two independent clauses (a comma splice); a colon works because the second part explains the first. *Fewer* for countable things like people |
| then | than | *than* for comparisons; *then* for time |
'''),
],
[
("user", r'''
Here are my messy notes from a meeting. Can you turn them into a clean summary with action items and owners?

"mtg w/ marketing 3/4. launch date maybe slip to apr 15? depends on legal review of claims - jess chasing. website copy 80% done, sam to finish by fri. need new screenshots after UI change - design (ravi) said next wed. budget for ads approved 20k. q about whether to do webinar - no decision, revisit next week. priya to send survey results to everyone"
'''),
("assistant", r'''
**Marketing sync: 4 March**

**Summary**
- The launch date may slip to **15 April**, depending on the legal review of product claims.
- Website copy is about 80% complete.
- New screenshots are needed because of the recent UI change.
- The ad budget of **$20k** has been approved.
- Whether to run a webinar is still undecided; to be revisited next week.

**Action items**

| # | action | owner | due |
|---|---|---|---|
| 1 | Follow up with Legal on the review of product claims | Jess | ASAP (blocks launch date) |
| 2 | Finish website copy | Sam | Friday |
| 3 | Produce new screenshots reflecting the UI change | Ravi (Design) | Next Wednesday |
| 4 | Send survey results to the team | Priya | Not specified |
| 5 | Decide whether to run a webinar | Whole group | Next week's meeting |

**Open questions**
- Final launch date: confirm once Legal responds.
- Does the website copy depend on the new screenshots? If so, Sam's Friday deadline may need to move to after Ravi's.

I flagged that last dependency because Friday comes before next Wednesday; you may want to check it before sending this out.
'''),
],
]
